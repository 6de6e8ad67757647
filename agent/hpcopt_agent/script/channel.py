"""JSON lines between an agent rank and the script process it started, over the
socket pair the agent makes for it (the script finds its end in ``HPCOPT_TRIAL_FD``).

Both ends are the same user's processes on the same node; still, only JSON crosses
(never pickles), and a line longer than :data:`MAX_LINE` ends the channel.
"""

from __future__ import annotations

import json
import select
import socket
from typing import Any

#: The longest message (one JSON object on one line) either side accepts.
MAX_LINE = 1 << 20


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        #: The other end closed (or sent something that is not a message).
        self.closed = False

    def send(self, message: dict[str, Any]) -> bool:
        """Sends one message; False when the other end is gone."""
        if self.closed:
            return False
        try:
            self.sock.sendall(json.dumps(message, allow_nan=True).encode() + b"\n")
        except OSError:
            self.closed = True
            return False
        return True

    def poll(self, timeout: float) -> list[dict[str, Any]]:
        """The messages that arrived within ``timeout`` seconds (none when the other end
        is gone: see :attr:`closed`)."""
        if self.closed:
            return []
        try:
            ready, _, _ = select.select([self.sock], [], [], max(0.0, timeout))
            if ready:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    self.closed = True
                self.buffer += chunk
        except OSError:
            self.closed = True
        out = []
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                self.closed = True
                break
            if isinstance(message, dict):
                out.append(message)
        if len(self.buffer) > MAX_LINE:
            self.closed = True
        return out

    def close(self) -> None:
        self.closed = True
        self.sock.close()
