#!/usr/bin/env python3
"""The chaos suite's small helpers, each run inside one namespace by bench/chaos/run.

  agents.py sample [--period-ms MS]
      Polls `ss -tinH state established` and prints one JSON line per poll:
      {"t": CLOCK_MONOTONIC seconds, "s": [[local_port, peer_port, max_pacing_bps], ...]}
      (max_pacing_bps is SO_MAX_PACING_RATE in bit/s as ss prints it, 0 when
      the socket has no cap). CLOCK_MONOTONIC is one clock for every network
      namespace, so the samples compare with the times run records. Stops on
      SIGTERM.
  agents.py sink --listen IP:PORT
      Accepts connections and checks that each one carries the pattern
      (PATTERN below) from its first byte; on SIGTERM, or once --expect N
      connections have closed, prints {"conns": [{"bytes", "intact", "ok",
      "eof", "error"}, ...]}: `intact` is how many bytes from the start matched.
  agents.py send --to IP:PORT (--seconds S | --bytes N)
      Sends the pattern with socket.sendall() (the shim wraps it) and prints
      {"bytes": N sent, "error": ...}; exit 1 on an error.
  agents.py relay --listen IP:PORT --to IP:PORT --delay-file FILE
      A TCP relay that holds every chunk, in each direction, for the number
      of milliseconds FILE holds (read every 10 ms; 0 or no file: no delay),
      keeping the byte order. A connection closed on one side is closed on
      the other.

The pattern: byte i of a stream is PATTERN[i % len(PATTERN)], a block of
65,521 bytes (a prime, so a lost or repeated run of any usual buffer size
shifts the alignment and shows). NioSender.java builds the same block.
"""
import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

PERIOD = 65521
PATTERN = bytes((j * 131 + 17) & 0xFF for j in range(PERIOD))
CHUNK = 256 * 1024
# Long enough that any offset plus one chunk lies inside it.
WINDOW = PATTERN * (CHUNK // PERIOD + 2)

ADDR = re.compile(r"(?:\[[^\]]*\]|[0-9.]+|\*):(\d+)$")
PACING = re.compile(r"pacing_rate [0-9.]+[KMG]?bps/([0-9.]+)([KMG]?)bps")
UNIT = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}


def parse_ss(text):
    """`ss -tinH` output -> [[local_port, peer_port, max_pacing_bps], ...]."""
    socks = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[0] in " \t":
            if socks:
                m = PACING.search(line)
                if m:
                    socks[-1][2] = float(m.group(1)) * UNIT[m.group(2)]
            continue
        ports = [m.group(1) for m in map(ADDR.match, line.split()) if m]
        if len(ports) >= 2:
            socks.append([int(ports[-2]), int(ports[-1]), 0.0])
    return socks


def sample(args):
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    period = args.period_ms / 1000
    while not stop.is_set():
        t = time.monotonic()
        out = subprocess.run(["ss", "-tinH", "state", "established"], capture_output=True,
                             text=True).stdout
        sys.stdout.write(json.dumps({"t": round(t, 4), "s": parse_ss(out)}) + "\n")
        sys.stdout.flush()
        stop.wait(max(0.0, period - (time.monotonic() - t)))
    return 0


def check_chunk(data, offset):
    """How many leading bytes of `data` match the pattern at stream offset `offset`."""
    o = offset % PERIOD
    want = WINDOW[o:o + len(data)]
    if data == want:
        return len(data)
    for i, (a, b) in enumerate(zip(data, want)):
        if a != b:
            return i
    return len(data)


def sink_conn(conn, rec):
    total = 0
    try:
        while True:
            data = conn.recv(CHUNK)
            if not data:
                rec["eof"] = True
                break
            if rec["ok"]:
                good = check_chunk(data, total)
                rec["intact"] += good
                if good < len(data):
                    rec["ok"] = False
            total += len(data)
            rec["bytes"] = total
    except OSError as e:
        rec["error"] = str(e)
    finally:
        conn.close()
        rec["done"] = True


def sink(args):
    host, port = args.listen.rsplit(":", 1)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, int(port)))
    srv.listen(64)
    srv.settimeout(0.1)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    conns, threads = [], []
    end = time.monotonic() + args.timeout_s
    while not stop.is_set() and time.monotonic() < end:
        if args.expect and sum(1 for c in conns if c["done"]) >= args.expect:
            break
        try:
            c, _ = srv.accept()
        except socket.timeout:
            continue
        rec = {"bytes": 0, "intact": 0, "ok": True, "eof": False, "error": None, "done": False}
        conns.append(rec)
        th = threading.Thread(target=sink_conn, args=(c, rec), daemon=True)
        th.start()
        threads.append(th)
    srv.close()
    for th in threads:
        th.join(timeout=2)
    print(json.dumps({"conns": conns}), flush=True)
    return 0


def send(args):
    host, port = args.to.rsplit(":", 1)
    sent = 0
    err = None
    try:
        s = socket.create_connection((host, int(port)), timeout=10)
        s.settimeout(None)
        end = time.monotonic() + args.seconds if args.seconds else None
        while True:
            n = CHUNK
            if args.bytes:
                n = min(n, args.bytes - sent)
                if n <= 0:
                    break
            elif time.monotonic() >= end:
                break
            o = sent % PERIOD
            s.sendall(WINDOW[o:o + n])
            sent += n
        s.close()
    except OSError as e:
        err = str(e)
    print(json.dumps({"bytes": sent, "error": err}), flush=True)
    return 1 if err else 0


def read_delay_ms(path):
    try:
        with open(path) as f:
            return max(0.0, float(f.read().strip() or 0))
    except (OSError, ValueError):
        return 0.0


async def relay_main(args):
    state = {"delay_s": 0.0}

    async def poll_delay():
        while True:
            state["delay_s"] = read_delay_ms(args.delay_file) / 1000
            await asyncio.sleep(0.01)

    async def pump(reader, writer):
        # Chunks wait in arrival order; each leaves at its arrival time plus
        # the delay in force when it arrived.
        q = asyncio.Queue()

        async def deliver():
            while True:
                due, data = await q.get()
                if data is None:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        task = asyncio.ensure_future(deliver())
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await q.put((time.monotonic() + state["delay_s"], data))
        except (ConnectionError, OSError):
            pass
        await q.put((0, None))
        try:
            await task
        except (ConnectionError, OSError):
            pass
        try:
            writer.close()
        except (ConnectionError, OSError):
            pass

    async def handle(cr, cw):
        th, tp = args.to.rsplit(":", 1)
        try:
            ur, uw = await asyncio.open_connection(th, int(tp))
        except OSError:
            cw.close()
            return
        await asyncio.gather(pump(cr, uw), pump(ur, cw), return_exceptions=True)

    asyncio.ensure_future(poll_delay())
    host, port = args.listen.rsplit(":", 1)
    server = await asyncio.start_server(handle, host, int(port), reuse_address=True)
    print("ready", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    server.close()
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--period-ms", type=float, default=10)
    k = sub.add_parser("sink")
    k.add_argument("--listen", required=True)
    k.add_argument("--expect", type=int, default=0)
    k.add_argument("--timeout-s", type=float, default=600)
    d = sub.add_parser("send")
    d.add_argument("--to", required=True)
    g = d.add_mutually_exclusive_group(required=True)
    g.add_argument("--seconds", type=float)
    g.add_argument("--bytes", type=int)
    r = sub.add_parser("relay")
    r.add_argument("--listen", required=True)
    r.add_argument("--to", required=True)
    r.add_argument("--delay-file", required=True)
    args = p.parse_args()
    if args.cmd == "sample":
        return sample(args)
    if args.cmd == "sink":
        return sink(args)
    if args.cmd == "send":
        return send(args)
    return asyncio.run(relay_main(args))


if __name__ == "__main__":
    sys.exit(main())
