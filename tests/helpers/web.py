"""The tests' HTTP calls: httpx's, with a timeout the machine's load stretches when the
test gives none (10 s, as written). httpx's own default is a fixed 5 s: tests that used
it failed with ``ReadTimeout`` on a machine loaded 20 deep while pytest's own limit had
stretched. A timeout a test gives is written ``scaled(seconds)``."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers.env import scaled

#: An HTTP request's timeout, in seconds as written, when the test gives none.
HTTP_TIMEOUT = 10.0


def _timeout(kwargs: dict[str, Any]) -> dict[str, Any]:
    kwargs.setdefault("timeout", scaled(HTTP_TIMEOUT))
    return kwargs


def request(method: str, url: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(method, url, **_timeout(kwargs))


def get(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(url, **_timeout(kwargs))


def post(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(url, **_timeout(kwargs))


def put(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.put(url, **_timeout(kwargs))


def patch(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.patch(url, **_timeout(kwargs))


def delete(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.delete(url, **_timeout(kwargs))


def http(**kwargs: Any) -> httpx.Client:
    """An ``httpx.Client`` (a base URL, headers, reused connections) with that timeout."""
    return httpx.Client(**_timeout(kwargs))
