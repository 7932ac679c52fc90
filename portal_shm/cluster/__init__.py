"""``backend="ray"``: Ray places and supervises env hosts; the steps flow over the host protocol."""
