"""Python websockets (Debian's 10.4) as a slow reader of a room, with the
server's permessage-deflate context takeover: the Python twin of
slow_reader.test.mjs (read its comment for the reasoning).

websockets' default offer (compression="deflate") is
`permessage-deflate; client_max_window_bits`: takeover both ways, and the
server's answer without server_no_context_takeover keeps the server's
window. The reader stops reading by not calling recv(): with max_queue=1
its reading task stops once one message waits, and asyncio stops reading
the socket once 64 KiB are buffered (TCP backpressure). A sender emits
room messages in rounds until hotpath_emit_drops_total shows the reader's
full outbox dropped some; the reader then reads again, catches up, and
calls echo/say with the random half of the last dropped message (an answer
is compressed against the connection's window, which must not hold a
message the reader never got: before the fix, zlib inflated it into
other bytes), receives a further run of 40, and echoes a received
message's random half, which must be compressed against the window (so
the case cannot pass without takeover).

    HOTPATH_BIN=path/to/hotpath /usr/bin/python3 compat/interop/slow_reader_test.py
"""

import asyncio
import functools
import json
import random
import re
import sys
import urllib.request

import websockets

from websockets_test import start

BODY = 8000
ROUND = 100
MAX_PHASE1 = 8000
WANT_DROPS = 50
AFTER = 40
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


@functools.lru_cache(maxsize=None)
def rand_half(k):
    r = random.Random(k)
    return "".join(ALPHABET[b & 63] for b in r.randbytes(BODY // 2))


def body(k):
    return (f"line {k} of the room, " * BODY)[: BODY // 2] + rand_half(k)


@functools.lru_cache(maxsize=None)
def payload(seq):
    return json.dumps({"seq": seq, "body": body(seq)}, separators=(",", ":")).encode()


def uvarint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def pstr(s):
    b = s.encode()
    return uvarint(len(b)) + b


def call(id_, method, params):
    return bytes([1]) + uvarint(id_) + pstr(method) + uvarint(5000) + json.dumps(params).encode()


def join(id_, room):
    return bytes([10]) + uvarint(id_) + pstr(room)


def emit_except(room, event, data):
    return bytes([12]) + pstr(room) + pstr(event) + bytes([1]) + data


def read_uvarint(b, i):
    v = shift = 0
    while True:
        v |= (b[i] & 0x7F) << shift
        shift += 7
        i += 1
        if b[i - 1] < 0x80:
            return v, i


def read_str(b, i):
    n, i = read_uvarint(b, i)
    return b[i:i + n].decode("utf-8", "replace"), i + n


def drops(addr):
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
        m = re.search(r"^hotpath_emit_drops_total (\d+)$", r.read().decode(), re.M)
    assert m, "hotpath_emit_drops_total in /metrics"
    return int(m.group(1))


class Reader:
    """Reads the reader's packets: room lines checked, answers by id."""

    def __init__(self, ws):
        self.ws, self.got, self.answers, self.wire, self.line_bytes = ws, [], {}, 0, 0
        for ext in ws.extensions:  # count what arrives on the wire
            decode = ext.decode

            def counting(frame, *, max_size=None, _decode=decode):
                self.wire += len(frame.data)
                return _decode(frame, max_size=max_size)

            ext.decode = counting

    def take(self, b):
        if b[0] == 12:
            _, i = read_str(b, 1)
            event, i = read_str(b, i)
            if event != "line":
                return
            self.line_bytes += len(b)
            data = b[i + 1:]
            try:
                seq = json.loads(data)["seq"]
            except Exception:
                seq = -1
            self.got.append((seq, isinstance(seq, int) and seq >= 0 and data == payload(seq)))
        elif b[0] in (2, 3):
            id_, i = read_uvarint(b, 1)
            self.answers[id_] = (b[0], b[i:])

    async def until(self, pred, timeout=10):
        async def loop():
            while not pred():
                self.take(await self.ws.recv())
        await asyncio.wait_for(loop(), timeout)


async def slow_reader(addr):
    async with websockets.connect(f"ws://{addr}/ws", subprotocols=["hotpath.v1"], compression="deflate",
                                  max_queue=1, ping_interval=None, open_timeout=5, close_timeout=2) as rws, \
            websockets.connect(f"ws://{addr}/ws", subprotocols=["hotpath.v1"], compression=None,
                               ping_interval=None, open_timeout=5, close_timeout=2) as sws:
        answer = rws.response_headers.get("Sec-WebSocket-Extensions", "")
        assert answer.startswith("permessage-deflate") and "server_no_context_takeover" not in answer, answer
        reader = Reader(rws)
        sender_answers = {}
        ids = iter(range(1, 1 << 30))

        async def sender_call(method, params):
            n = next(ids)
            await sws.send(call(n, method, params))
            async def loop():
                while n not in sender_answers:
                    b = await sws.recv()
                    if b[0] in (2, 3):
                        sender_answers[read_uvarint(b, 1)[0]] = b[0]
            await asyncio.wait_for(loop(), 10)
            assert sender_answers[n] == 2

        async def reader_call(packet, n):
            await rws.send(packet)
            await reader.until(lambda: n in reader.answers)
            return reader.answers[n]

        async def echo(text):
            n = next(ids)
            wire0 = reader.wire
            try:
                kind, data = await reader_call(call(n, "echo/say", {"text": text}), n)
            except Exception as e:  # closed, timed out
                return False, f"{type(e).__name__}: {e}", 0
            ok = kind == 2 and data == json.dumps({"text": text}, separators=(",", ":")).encode()
            return ok, "" if ok else f"answered {data[:60]!r}", reader.wire - wire0

        n = next(ids)
        assert (await reader_call(join(n, "lobby"), n))[0] == 2
        n = next(ids)
        await sws.send(join(n, "lobby"))
        await sender_call("echo/say", {"text": "sync"})

        # Phase 1: the reader calls no recv().
        before = drops(addr)
        seq = dropped = 0
        while dropped < WANT_DROPS and seq < MAX_PHASE1:
            for _ in range(ROUND):
                await sws.send(emit_except("lobby", "line", payload(seq)))
                seq += 1
            await sender_call("echo/say", {"text": "sync"})
            dropped = drops(addr) - before
        sent1 = seq
        assert dropped > 0, f"no emit dropped after {sent1} messages: the outbox never overflowed, nothing was tested"

        # It reads again and catches up, then echoes the last dropped text.
        sync_ok = (await echo("sync"))[0]
        received1 = len(reader.got)
        have = {s for s, _ in reader.got}
        last_dropped = sent1 - 1
        while last_dropped >= 0 and last_dropped in have:
            last_dropped -= 1
        after_drop = await echo(rand_half(last_dropped))

        # Phase 2: a run while it reads, then the positive control.
        for _ in range(AFTER):
            await sws.send(emit_except("lobby", "line", payload(seq)))
            seq += 1
        await sender_call("echo/say", {"text": "sync"})
        try:
            await reader.until(lambda: reader.got and reader.got[-1][0] == seq - 1)
        except Exception:
            pass
        control = await echo(rand_half(seq - 1))
        dropped2 = drops(addr) - before - dropped
        closed = rws.close_code

        got = reader.got
        bad = [s for s, ok in got if not ok]
        seqs = [s for s, _ in got]
        summary = (f"sent {seq} room messages ({sent1} while paused, {AFTER} after), received {len(got)} "
                   f"({received1} by the resume), {len(bad)} not as sent, dropped {dropped} + {dropped2} (server's count); "
                   f"echo after the drops (text of dropped #{last_dropped}): "
                   f"{'intact' if after_drop[0] else 'NOT INTACT (' + after_drop[1] + ')'}, {after_drop[2]} wire bytes; "
                   f"echo of the last received: {'intact' if control[0] else 'NOT INTACT (' + control[1] + ')'}, "
                   f"{control[2]} wire bytes; close {closed}; extension {answer!r}; "
                   f"{reader.wire} wire bytes for {reader.line_bytes} bytes of room packets")
        print(f"# {summary}")
        assert sync_ok, f"the reader's call after the resume: {summary}"
        assert closed is None, f"the reader's connection closed: {summary}"
        assert after_drop[0], f"the answer after the drops: {summary}"
        assert not bad, f"room messages not as sent, first at seq {bad[0]}: {summary}"
        assert all(b > a for a, b in zip(seqs, seqs[1:])), f"out of order: {summary}"
        assert received1 + dropped == sent1, f"every message received or counted dropped: {summary}"
        assert dropped2 == 0, f"drops after the resume: {summary}"
        assert seqs[-AFTER:] == list(range(sent1, sent1 + AFTER)), f"the run after the resume: {summary}"
        # Positive controls, as in slow_reader.test.mjs: the room messages
        # were compressed (so they joined the server's window; each is half
        # repetitive text), and the echo of a received message's random half
        # was compressed against the window, so takeover was in use.
        assert 0 < reader.wire < 0.8 * reader.line_bytes, f"room messages compressed: {summary}"
        assert control[0] and control[2] < 3200, f"the echo of a received run compressed against the window: {summary}"
        await rws.close()


async def main():
    proc, addr = start("-context-takeover", "-metrics", "-ticker", "1h")
    try:
        await asyncio.wait_for(slow_reader(addr), 60)
        print("ok   websockets slow reader → hotpath -context-takeover: dropped emits left the window intact")
        return 0
    except Exception as e:
        print(f"FAIL websockets slow reader → hotpath -context-takeover: {type(e).__name__}: {e}")
        return 1
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
