"""The message kinds of the host protocol (``header["cmd"]``), named once for both sides.

The agent sends ``HELLO`` (then ``RESET``, ``STEP``, ``SEND``, ``CALL``, ``GET_ATTR``, ``SET_ATTR``,
``RENDER``, ``STATS``, ``GET_STATE``, ``SET_STATE``, ``RECORD``, ``CLOSE``) and ``PING``; the host answers ``WELCOME``, ``RESULT``, ``BATCH`` (an async
sub-batch), ``ERROR``, ``PONG`` and ``UNKNOWN_SESSION``. ``FINISH`` never crosses the network: the
host's router hands a lockstep step it started to the session's thread with it.
"""

HELLO = "hello"
WELCOME = "welcome"
RESET = "reset"
STEP = "step"
SEND = "send"
BATCH = "batch"
CALL = "call"
GET_ATTR = "get_attr"
SET_ATTR = "set_attr"
RENDER = "render"
STATS = "stats"
GET_STATE = "get_state"
SET_STATE = "set_state"
RECORD = "record"
CLOSE = "close"
RESULT = "result"
ERROR = "error"
PING = "ping"
PONG = "pong"
UNKNOWN_SESSION = "unknown_session"
FINISH = "_finish"

# What a host takes from the network: every other kind (``FINISH`` included) is refused unread.
FROM_AGENTS = frozenset(
    {HELLO, PING, RESET, STEP, SEND, CALL, GET_ATTR, SET_ATTR, RENDER, STATS, GET_STATE, SET_STATE, RECORD, CLOSE}
)
