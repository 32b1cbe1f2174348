"""Python websockets (Debian's python3-websockets 10.4) against hotpath -echo.

Runs every permessage-deflate offer websockets can make (no_context_takeover
each way, server and client window bits, several offers in one header)
against `hotpath -echo` with context takeover off (the default) and on,
with messages from 0 B to 16 MiB, whole and fragmented. websockets checks
the server's answer strictly (RFC 7692 §7.1.2.1: server_max_window_bits
must be echoed, never larger than offered), so a connection that opens has
passed that check. Counting wrappers on the negotiated extension see how
many frames went out and came in compressed.

Run with Debian's interpreter, which sees Debian's package:

    HOTPATH_BIN=path/to/hotpath /usr/bin/python3 compat/interop/websockets_test.py
"""

import asyncio
import os
import random
import re
import subprocess
import sys
import time

import websockets
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory as Offer

MIB = 1 << 20
# The largest message is exactly the server's limit, sent compressed too
# (a compressor makes incompressible data a few bytes longer on the wire).
MAX_MESSAGE = 16 * MIB


def start(*args):
    """Start hotpath on a free loopback port; return (process, address)."""
    binary = os.environ["HOTPATH_BIN"]
    proc = subprocess.Popen([binary, "-addr", "127.0.0.1:0", *args], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        m = re.search(r"http://([0-9.]+:[0-9]+)", line)
        if m:
            return proc, m.group(1)
        if proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("hotpath did not start")


def text(n):
    return ('{"symbol":"HOT","price":101.25},' * (n // 32 + 1))[:n]


def randbytes(n, seed):
    return random.Random(seed).randbytes(n)


def far(seed):
    """Random blocks of 24 KB down to 300 B, each twice in a row: the repeats
    compress only by back references as far back as the block, past a 2^8-2^14
    byte window. A server that answered server_max_window_bits but compressed
    with a larger window makes websockets' zlib, inflating with the negotiated
    window, fail on them ("invalid distance too far back")."""
    blocks = [randbytes(n, seed + n) for n in (24000, 6000, 1500, 300)]
    return b"".join(b + b for b in blocks)


# The messages every offer variant echoes: (payload, fragments).
MESSAGES = [
    ("", 1),
    (text(1), 1),
    (randbytes(125, 1), 1),
    (randbytes(126, 2), 1),
    (text(4096), 1),
    (randbytes(65536, 3), 1),
    (text(65536), 4),
    (text(MIB).encode(), 16),
    (randbytes(3000, 4), 3),
    (far(5), 1),
]


def offers():
    """The offer variants: (name, extensions, compression expected)."""
    out = [
        ("no extension", None, False),
        ("websockets default (client_max_window_bits)", [Offer(compress_settings={"memLevel": 5})], True),
        ("server_no_context_takeover", [Offer(server_no_context_takeover=True)], True),
        ("client_no_context_takeover", [Offer(client_no_context_takeover=True)], True),
        ("no_context_takeover both ways", [Offer(server_no_context_takeover=True, client_no_context_takeover=True)], True),
        ("client_max_window_bits not offered", [Offer(client_max_window_bits=None)], True),
    ]
    for bits in range(8, 16):
        out.append((f"server_max_window_bits={bits}", [Offer(server_max_window_bits=bits)], True))
    # Python's zlib cannot compress with a 256-byte window (wbits=-8 is
    # refused), so websockets cannot keep a client_max_window_bits=8
    # promise: it is not in its matrix.
    for bits in range(9, 16):
        out.append((f"client_max_window_bits={bits}", [Offer(client_max_window_bits=bits)], True))
        out.append((f"both windows {bits} bits", [Offer(server_max_window_bits=bits, client_max_window_bits=bits)], True))
    # Several offers in one header: websockets sends one per factory, in
    # order, and takes the answer that matches one of them.
    out.append(("two offers: 9-bit server window preferred, then default",
                [Offer(server_max_window_bits=9, server_no_context_takeover=True), Offer()], True))
    out.append(("three offers of different windows",
                [Offer(server_max_window_bits=10, client_max_window_bits=10), Offer(server_max_window_bits=12), Offer()], True))
    return out


def count_frames(ws):
    """Wrap the negotiated extension to count compressed frames each way."""
    counts = {"in": 0, "out": 0}
    for ext in ws.extensions:
        decode, encode = ext.decode, ext.encode

        def counting_decode(frame, *, max_size=None, _decode=decode):
            if frame.rsv1:
                counts["in"] += 1
            return _decode(frame, max_size=max_size)

        def counting_encode(frame, _encode=encode):
            out = _encode(frame)
            if out.rsv1:
                counts["out"] += 1
            return out

        ext.decode, ext.encode = counting_decode, counting_encode
    return counts


async def round_trip(ws, data, fragments):
    if fragments > 1:
        step = -(-len(data) // fragments)
        await ws.send([data[i:i + step] for i in range(0, len(data), step)])
    else:
        await ws.send(data)
    back = await asyncio.wait_for(ws.recv(), 60)
    if type(back) is not type(data) or back != data:
        raise AssertionError(f"echo of {len(data)} {type(data).__name__} differs ({len(back)} {type(back).__name__})")


async def close_cleanly(ws):
    """Run the closing handshake: 1000 sent, 1000 back (RFC 6455 §5.5.1)."""
    await ws.close()
    if ws.close_code != 1000:
        raise AssertionError(f"closed with {ws.close_code}")


async def check_offer(addr, name, extensions, compressed):
    kwargs = {"compression": None, "extensions": extensions} if extensions else {"compression": None}
    async with websockets.connect(f"ws://{addr}/ws", max_size=64 * MIB, ping_interval=None, **kwargs) as ws:
        answer = ws.response_headers.get("Sec-WebSocket-Extensions", "")
        if compressed != bool(ws.extensions):
            raise AssertionError(f"extensions answered {answer!r}")
        counts = count_frames(ws)
        for data, fragments in MESSAGES:
            await round_trip(ws, data, fragments)
        await close_cleanly(ws)
    check_wire(counts, compressed)
    return answer, counts


def check_wire(counts, compressed):
    """Compressed frames both ways when the extension was agreed, else none."""
    if compressed and (counts["in"] == 0 or counts["out"] == 0):
        raise AssertionError(f"compressed frames: {counts['out']} sent, {counts['in']} received")
    if not compressed and (counts["in"] or counts["out"]):
        raise AssertionError("compressed frames without the extension")


async def check_sizes(addr, compression):
    """0 B to 16 MiB, whole and fragmented."""
    async with websockets.connect(f"ws://{addr}/ws", max_size=64 * MIB, ping_interval=None, compression=compression) as ws:
        counts = count_frames(ws)
        for n in (0, 1, 125, 126, 127, 65535, 65536, MIB):
            await round_trip(ws, randbytes(n, n), 1)
            await round_trip(ws, text(n), 8 if n > 8 else 1)
        await round_trip(ws, text(16 * MIB), 1)
        await round_trip(ws, randbytes(16 * MIB, 16), 16)
        await close_cleanly(ws)
    check_wire(counts, compression is not None)


async def check_takeover_run(addr):
    """Context takeover both ways over a run of 40 related messages."""
    async with websockets.connect(f"ws://{addr}/ws", max_size=64 * MIB, ping_interval=None) as ws:
        answer = ws.response_headers.get("Sec-WebSocket-Extensions", "")
        if answer != "permessage-deflate":
            raise AssertionError(f"takeover both ways not agreed: {answer!r}")
        counts = count_frames(ws)
        base = randbytes(40000, 99)
        for i in range(40):
            msg = text(300 + 50 * i).encode() + base[: (i % 7 + 1) * 5000]
            await round_trip(ws, msg, 1)
        await close_cleanly(ws)
    check_wire(counts, True)


async def main():
    servers = [start("-echo", "-max-message", str(MAX_MESSAGE)),
               start("-echo", "-context-takeover", "-max-message", str(MAX_MESSAGE))]
    failures = 0
    passed = 0

    async def case(label, coro):
        nonlocal failures, passed
        try:
            detail = await coro
            passed += 1
            print(f"ok   {label}" + (f"  [{detail[0]}; compressed {detail[1]['out']} out, {detail[1]['in']} in]" if detail else ""))
        except Exception as e:  # every failure is reported, then the next case runs
            failures += 1
            print(f"FAIL {label}: {type(e).__name__}: {e}")

    try:
        for (proc, addr), server in zip(servers, ["echo", "echo -context-takeover"]):
            for name, extensions, compressed in offers():
                await case(f"websockets → hotpath {server}: {name}", check_offer(addr, name, extensions, compressed))
        addr = servers[0][1]
        await case("websockets → hotpath echo: 0 B to 16 MiB, no extension", check_sizes(addr, None))
        await case("websockets → hotpath echo: 0 B to 16 MiB, permessage-deflate", check_sizes(addr, "deflate"))
        await case("websockets → hotpath echo -context-takeover: 40 messages, takeover both ways", check_takeover_run(servers[1][1]))
    finally:
        for proc, _ in servers:
            proc.terminate()
            proc.wait(10)
    print(f"python websockets {websockets.__version__}: {passed} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
