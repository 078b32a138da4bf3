"""The object store stand-in's TLS front passes TensorFlow's requests on in a form Go's HTTP
server reads (``tools/object_store.py``); the stand-in itself runs in tests/e2e."""

from __future__ import annotations

import asyncio

import pytest

from tools import object_store

AUTH = f"Authorization: {object_store.AUTHORIZATION}\r\n".encode()
DIR_MARKER = (
    b"POST /upload/storage/v1/b/b/o?uploadType=media&name=runs%2F HTTP/1.1\r\n" + AUTH
    + b"Content-Length: 0\r\nTransfer-Encoding: identity\r\nExpect: 100-continue\r\n\r\n"
)  # fmt: skip
UPLOAD = (
    b"PUT /upload/storage/v1/b/b/o?upload_id=1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
    + AUTH + b"Content-Range: bytes 0-4/5\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
)  # fmt: skip
PLAIN = b"PUT /x HTTP/1.1\r\n" + AUTH + b"Content-Length: 3\r\n\r\nabc"


class Sink:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        pass


def passed_on(sent: bytes, answered: Sink | None = None) -> tuple[bytes, BaseException | None]:
    """What the front writes to fake-gcs-server for the client bytes ``sent``, and how it
    ended (the client closing after its last request: IncompleteReadError); what it answers
    the client itself goes to ``answered``."""

    async def run() -> tuple[bytes, BaseException | None]:
        reader = asyncio.StreamReader()
        reader.feed_data(sent)
        reader.feed_eof()
        sink = Sink()
        try:
            await object_store._requests(reader, sink, answered or Sink())  # type: ignore[arg-type]
        except (asyncio.IncompleteReadError, ConnectionError) as err:
            return sink.data, err
        return sink.data, None

    # A loop of its own, never the thread's current one: asyncio.run would leave none set, which
    # breaks later tests that ask for the current loop (Pulumi's mocks in test_render).
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        (DIR_MARKER, DIR_MARKER.replace(b"Transfer-Encoding: identity\r\n", b"")),
        (UPLOAD, UPLOAD.replace(b"Content-Length: 5\r\n", b"")),
        (PLAIN, PLAIN),
        (DIR_MARKER + UPLOAD + PLAIN, None),  # one connection, three requests
    ],
    ids=["identity-dropped", "length-beside-chunked-dropped", "plain-body", "keep-alive"],
)
def test_requests_are_passed_on_in_a_form_go_reads(sent: bytes, expected: bytes | None):
    if expected is None:
        expected = b"".join(passed_on(r)[0] for r in (DIR_MARKER, UPLOAD, PLAIN))
    out, end = passed_on(sent)
    assert out == expected, out
    assert isinstance(end, asyncio.IncompleteReadError), end  # only the client's close ends it


@pytest.mark.parametrize(
    "auth",
    [b"", b"Authorization: Bearer another-token\r\n"],
    ids=["anonymous", "another-token"],
)
def test_a_request_without_the_metadata_servers_token_is_answered_401(auth: bytes):
    answered = Sink()
    out, end = passed_on(PLAIN.replace(AUTH, auth) + PLAIN, answered)
    assert out == b"" and end is None, (out, end)  # nothing passed on, the connection ended
    assert answered.data == object_store.UNAUTHORIZED, answered.data
    assert answered.data.startswith(b"HTTP/1.1 401 "), answered.data


def test_another_transfer_coding_is_not_passed_on():
    sent = b"PUT /x HTTP/1.1\r\n" + AUTH + b"Transfer-Encoding: gzip, chunked\r\n\r\n"
    out, end = passed_on(sent)
    assert out == b"" and isinstance(end, ConnectionError), (out, end)
    assert "gzip" in str(end), end
