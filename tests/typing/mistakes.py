"""Typical mistakes, each made twice: on httpx's client, then on retrysafe's (next line).

This is mypy input, not a test: ``tests/test_client_types.py`` runs ``mypy --strict``
on it and checks that every mistake flagged on an ``httpx`` line is flagged on the
``retrysafe`` line right after it, and that nothing else is. Every statement in a
function body is half of a pair: a line using ``hx``/``ahx``/``httpx.Client(``/
``httpx.AsyncClient(``, then the same line with ``rs``/``ars``/``retrysafe.Client(``/
``retrysafe.AsyncClient(``.
"""

import httpx

import retrysafe
from retrysafe import RetryPolicy

URL = "https://api.example.com/items"


def takes_str(value: str) -> None: ...


def takes_bytes(value: bytes) -> None: ...


def sync_mistakes(hx: httpx.Client, rs: retrysafe.Client, request: httpx.Request) -> None:
    # Misspelled keywords.
    hx.get(URL, polciy=RetryPolicy())
    rs.get(URL, polciy=RetryPolicy())
    hx.get(URL, param={"q": 1})
    rs.get(URL, param={"q": 1})
    hx.post(URL, jsn={"amount": 1})
    rs.post(URL, jsn={"amount": 1})
    hx.put(URL, header={"a": "b"})
    rs.put(URL, header={"a": "b"})
    hx.patch(URL, conten=b"x")
    rs.patch(URL, conten=b"x")
    hx.delete(URL, timout=1.0)
    rs.delete(URL, timout=1.0)
    hx.head(URL, follow_redirect=True)
    rs.head(URL, follow_redirect=True)
    hx.options(URL, extension={})
    rs.options(URL, extension={})
    hx.request("POST", URL, idempotency=True)
    rs.request("POST", URL, idempotency=True)
    hx.stream("GET", URL, polciy=RetryPolicy())
    rs.stream("GET", URL, polciy=RetryPolicy())
    hx.send(request, strem=True)
    rs.send(request, strem=True)
    # Wrong types.
    hx.get(URL, timeout="soon")
    rs.get(URL, timeout="soon")
    hx.get(URL, headers=5)
    rs.get(URL, headers=5)
    hx.get(URL, params=5)
    rs.get(URL, params=5)
    hx.get(URL, follow_redirects="yes")
    rs.get(URL, follow_redirects="yes")
    hx.get(URL, policy=5)
    rs.get(URL, policy=5)
    hx.get(URL, policy="fast")
    rs.get(URL, policy="fast")
    hx.post(URL, idempotency_key=5)
    rs.post(URL, idempotency_key=5)
    hx.post(URL, dependency=5)
    rs.post(URL, dependency=5)
    hx.post(URL, data=b"raw")
    rs.post(URL, data=b"raw")
    hx.post(URL, files=5)
    rs.post(URL, files=5)
    hx.post(URL, auth=None)
    rs.post(URL, auth=None)
    hx.put(URL, headers={"a": 1})
    rs.put(URL, headers={"a": 1})
    hx.patch(URL, cookies=5)
    rs.patch(URL, cookies=5)
    hx.options(URL, auth=5)
    rs.options(URL, auth=5)
    hx.head(URL, extensions=[1])
    rs.head(URL, extensions=[1])
    hx.request(5, URL)
    rs.request(5, URL)
    hx.request("GET", 5)
    rs.request("GET", 5)
    hx.stream("POST", URL, timeout="soon")
    rs.stream("POST", URL, timeout="soon")
    hx.send(request, stream="yes")
    rs.send(request, stream="yes")
    hx.send(URL)
    rs.send(URL)
    # Keywords a verb does not take.
    hx.get(URL, json={"q": 1})
    rs.get(URL, json={"q": 1})
    hx.delete(URL, content=b"x")
    rs.delete(URL, content=b"x")
    hx.head(URL, data={"a": "b"})
    rs.head(URL, data={"a": "b"})
    # What comes back.
    takes_str(hx.get(URL).status_code)
    takes_str(rs.get(URL).status_code)
    hx.get(URL).json(5)
    rs.get(URL).json(5)


def constructor_mistakes() -> None:
    httpx.Client(base_ur=URL)
    retrysafe.Client(base_ur=URL)
    httpx.Client(timeout="soon")
    retrysafe.Client(timeout="soon")
    httpx.Client(headers=5)
    retrysafe.Client(headers=5)
    httpx.Client(verify=5)
    retrysafe.Client(verify=5)
    httpx.Client(http2="yes")
    retrysafe.Client(http2="yes")
    httpx.Client(limits=5)
    retrysafe.Client(limits=5)
    httpx.Client(max_redirects="3")
    retrysafe.Client(max_redirects="3")
    httpx.Client(transport=httpx.AsyncHTTPTransport())
    retrysafe.Client(transport=httpx.AsyncHTTPTransport())
    httpx.Client(mounts={"http://": 5})
    retrysafe.Client(mounts={"http://": 5})
    httpx.Client(event_hooks={"request": [5]})
    retrysafe.Client(event_hooks={"request": [5]})
    httpx.Client(proxy=5)
    retrysafe.Client(proxy=5)
    httpx.Client(policy=RetryPolicy(attempts="3"))
    retrysafe.Client(policy=RetryPolicy(attempts="3"))
    httpx.Client(URL)
    retrysafe.Client(URL)
    httpx.AsyncClient(base_ur=URL)
    retrysafe.AsyncClient(base_ur=URL)
    httpx.AsyncClient(timeout="soon")
    retrysafe.AsyncClient(timeout="soon")
    httpx.AsyncClient(transport=httpx.HTTPTransport())
    retrysafe.AsyncClient(transport=httpx.HTTPTransport())
    httpx.AsyncClient(mounts={"http://": httpx.HTTPTransport()})
    retrysafe.AsyncClient(mounts={"http://": httpx.HTTPTransport()})


async def async_mistakes(ahx: httpx.AsyncClient, ars: retrysafe.AsyncClient) -> None:
    await ahx.get(URL, polciy=RetryPolicy())
    await ars.get(URL, polciy=RetryPolicy())
    await ahx.post(URL, jsn={"amount": 1})
    await ars.post(URL, jsn={"amount": 1})
    await ahx.get(URL, timeout="soon")
    await ars.get(URL, timeout="soon")
    await ahx.put(URL, headers=5)
    await ars.put(URL, headers=5)
    await ahx.patch(URL, policy="fast")
    await ars.patch(URL, policy="fast")
    await ahx.delete(URL, json={})
    await ars.delete(URL, json={})
    await ahx.head(URL, auth=None)
    await ars.head(URL, auth=None)
    await ahx.options(URL, follow_redirects="yes")
    await ars.options(URL, follow_redirects="yes")
    await ahx.request("GET", URL, idempotency_key=5)
    await ars.request("GET", URL, idempotency_key=5)
    await ahx.send(httpx.Request("GET", URL), strem=True)
    await ars.send(httpx.Request("GET", URL), strem=True)
    ahx.stream("GET", URL, polciy=RetryPolicy())
    ars.stream("GET", URL, polciy=RetryPolicy())
    ahx.stream("GET", URL, timeout="soon")
    ars.stream("GET", URL, timeout="soon")
    ahx.get(URL)
    ars.get(URL)
    takes_bytes(ahx.get(URL))
    takes_bytes(ars.get(URL))
