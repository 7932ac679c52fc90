"""The env host's one port: the socket agents connect to, and who is on the other end.

A ROUTER socket, CURVE-encrypted and accepting only the client keys of the clients directory
(``--insecure`` aside), with a cap on message size, bounded queues and libzmq's heartbeats; beside
it the monitor that reports lost connections and the outbox through which the sessions' threads
send their replies (the router forwards them). A message's identity is the CURVE key its
connection proved (``user``), named after its key file for the log (``who``).

A session belongs to the key that opened it. Another key presenting the session's routing id
holds that id's connection (libzmq refuses a second connection with a held id, not a takeover of
a lost one): its messages are refused, and the session's replies wait (resent from its window)
until its own key speaks on it again (``from_owner``).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Optional, cast

import zmq
from zmq.auth.thread import ThreadAuthenticator

from ...errors import PortalError
from .. import frames, keys
from ..messages import ERROR
from .client_keys import ClientKeys
from .options import HostOptions

if TYPE_CHECKING:
    from .session import HostSession

log = logging.getLogger("portal_shm.host")

ZAP_DOMAIN = "portal-shm"


class HostPort:
    """The sockets of ``portal-shm host`` and the keys behind them; ``close()`` releases them."""

    def __init__(self, context: zmq.Context[Any], options: HostOptions, outbox_address: str) -> None:
        self.insecure = options.insecure
        self.public_key: Optional[str] = None  # (Z85) what agents pin
        self.public_key_path: Optional[str] = None
        self._clients: Optional[ClientKeys] = None
        self._auth: Optional[ThreadAuthenticator] = None
        self._held: set[bytes] = set()  # routing ids another key took over: their session's replies wait
        opened: list[zmq.Socket[Any]] = []
        try:
            socket = self._router(context, options)
            opened.append(socket)
            monitor = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            opened.append(monitor)
            try:
                socket.bind(options.bind)
            except zmq.ZMQError as exc:
                raise PortalError(
                    f"cannot bind {options.bind}: {exc}; pick another port or stop what holds it"
                ) from None
            outbox: zmq.Socket[Any] = context.socket(zmq.PULL)
            opened.append(outbox)
            outbox.bind(outbox_address)
        except BaseException:
            self._stop_auth()
            for opened_socket in opened:
                opened_socket.close(0)
            raise
        self.socket, self.monitor, self.outbox = socket, monitor, outbox
        self.address = socket.getsockopt_string(zmq.LAST_ENDPOINT)

    def _router(self, context: zmq.Context[Any], o: HostOptions) -> zmq.Socket[Any]:
        socket: zmq.Socket[Any] = context.socket(zmq.ROUTER)
        # A routing id stays with the connection that holds it: another connection presenting it
        # (another key that learnt it) is refused by libzmq until the holder's connection is gone.
        socket.setsockopt(zmq.ROUTER_HANDOVER, 0)
        socket.setsockopt(zmq.MAXMSGSIZE, o.max_message_bytes)
        # Bounded queues per connection: an agent that stops reading makes the host drop its replies
        # (its resend window has them), never hold them without end.
        socket.setsockopt(zmq.SNDHWM, 64)
        socket.setsockopt(zmq.RCVHWM, 64)
        socket.setsockopt(zmq.LINGER, 0)
        half = max(1, int(o.heartbeat_timeout * 500))
        socket.setsockopt(zmq.HEARTBEAT_IVL, min(1000, half))
        socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, half)
        socket.setsockopt(zmq.HEARTBEAT_TTL, half)
        if o.insecure:
            return socket
        try:
            public, secret, path = keys.ensure_host_keys(o.keys_dir)
            self.public_key, self.public_key_path = public.decode("ascii"), path
            clients = o.clients_dir or os.path.join(os.path.dirname(path), "clients")
            os.makedirs(clients, mode=0o700, exist_ok=True)
            self._clients = ClientKeys(clients)
        except BaseException:
            socket.close(0)
            raise
        self._auth = ThreadAuthenticator(context, log=logging.getLogger("portal_shm.host.zap"))
        self._auth.start()
        self._auth.configure_curve_callback(ZAP_DOMAIN, credentials_provider=self._clients)
        socket.setsockopt(zmq.CURVE_SERVER, 1)
        socket.setsockopt(zmq.CURVE_PUBLICKEY, public)
        socket.setsockopt(zmq.CURVE_SECRETKEY, secret)
        socket.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN.encode())
        return socket

    # -- who is on the other end --------------------------------------------------------------------
    def client_names(self) -> dict[bytes, str]:
        """The accepted agent keys (Z85) and their key files' names; none on an insecure host."""
        return {} if self._clients is None else self._clients.allowed()

    def user(self, frame: Any) -> str:
        """The CURVE public key (Z85) the message's connection proved; "" on an insecure host."""
        if self.insecure:
            return ""
        try:
            return cast(str, frame.get("User-Id"))  # (a str whenever CURVE is on)
        except zmq.ZMQError:
            return "?"

    def who(self, frame: Any) -> str:
        """The peer's address and its key file's name, for the log."""
        try:
            peer = frame.get("Peer-Address")
        except zmq.ZMQError:
            peer = "?"
        if self.insecure:
            return f"{peer} (insecure)"
        try:
            key = frame.get("User-Id")
        except zmq.ZMQError:
            key = "?"
        name = self.client_names().get(key.encode("ascii"), "?") if key != "?" else "?"
        return f"{peer} ({name})"

    @staticmethod
    def fd(frame: Any) -> Optional[int]:
        """The descriptor of the message's connection (what the monitor names a lost one by)."""
        try:
            fd = frame.get(zmq.SRCFD)
            return fd if isinstance(fd, int) else None
        except zmq.ZMQError:
            return None

    def from_owner(self, session: HostSession, frame: Any) -> bool:
        """Whether the message came with the key that opened ``session``; if not, it is refused
        and the session's replies wait until its own key is back."""
        if self.user(frame) == session.user:
            if self._held and session.identity in self._held:
                self._held.discard(session.identity)
                log.warning("session %s: its own key is back on its connection; its replies flow again", session.client)
            return True
        session.refused += 1
        if session.refused == 1 or session.refused % 1000 == 0:
            log.warning(
                "refused %d message(s) for session %s from another key (%s): a session belongs to the key that "
                "opened it; its replies wait until that key is back",
                session.refused,
                session.client,
                self.who(frame),
            )
        self._held.add(session.identity)
        self.reply(
            session.identity,
            {"cmd": ERROR, "kind": "PortalError", "message": "refused: this connection's id belongs to another key"},
        )
        return False

    def released(self, identity: bytes) -> None:
        """``identity``'s session ended: the id is nobody's to hold."""
        self._held.discard(identity)

    # -- out ---------------------------------------------------------------------------------------
    def send(self, message: list[Any]) -> None:
        """A session's message (its routing id first: bytes, or the frame a session's thread sent),
        unless another key holds that id now."""
        if self._held:
            first = message[0]
            if (first.bytes if isinstance(first, zmq.Frame) else first) in self._held:
                return
        self.socket.send_multipart(message, copy=False)

    def reply(self, identity: bytes, header: dict[str, Any]) -> None:
        """A message of the router's own (not of a session's numbered stream)."""
        self.socket.send_multipart([identity] + frames.pack(header))

    def describe(self) -> list[str]:
        """The banner's lines on keys: the key agents pin, and whose keys are accepted."""
        if self.insecure or self._clients is None:
            return ["  INSECURE: no encryption, no authentication (--insecure)"]
        accepted = sorted(self._clients.allowed().values())
        return [
            f"  public key  {self.public_key}  (agents pin it: host_key= this or a copy of {self.public_key_path})",
            f"  clients     {self._clients.directory}: {len(accepted)} agent key(s)"
            + (
                f" ({', '.join(accepted[:8])}{', ...' if len(accepted) > 8 else ''})"
                if accepted
                else "; copy each agent's USER@HOST.key there"
            ),
        ]

    def close(self) -> None:
        self._stop_auth()
        for socket in (self.monitor, self.outbox, self.socket):
            socket.close(0)

    def _stop_auth(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
