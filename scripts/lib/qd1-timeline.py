#!/usr/bin/env python3
"""Where a QD1 read's time goes, from a system-wide perf trace (see scripts/profile-qd1.sh).

Reads `perf script --ns -F comm,pid,tid,cpu,time,event,trace` on stdin: syscall entries and
exits (epoll_wait excluded), block-layer issues, io_uring completions and scheduler events, with
the client's process id in argv[1] and OSD threads named osd-*. Follows each read from
the client's send of its 76-byte request to its read of the 4,144-byte reply (a 4 KiB page and
its frame header) and prints the median and spread of each phase in between.
"""
import re
import statistics
import sys

client = sys.argv[1]
line_re = re.compile(r"^\s*(.+?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)$")
SENDTO, RECVFROM, URING_ENTER = 44, 45, 426
REQUEST, REPLY = "76", "4144"

ops, op = [], None
for line in sys.stdin:
    m = line_re.match(line)
    if not m:
        continue
    comm, pid, _tid, _cpu, ts, event, rest = m.groups()
    ts = float(ts) * 1e6
    fields = rest.split()
    is_client, is_osd = pid == client, comm.startswith("osd")
    if event == "raw_syscalls:sys_enter":
        nr = int(fields[1])
        if is_client and nr == SENDTO and ", 4c," in rest:
            op = {"send": ts}
        elif op and is_osd and nr == URING_ENTER and "osd_recv" in op:
            op.setdefault("submit", ts)
        elif op and is_osd and nr == SENDTO and "done_disk" in op:
            op.setdefault("reply", ts)
    elif event == "raw_syscalls:sys_exit" and op:
        nr, ret = int(fields[1]), fields[-1]
        if is_client and nr == SENDTO and ret == REQUEST:
            op.setdefault("sent", ts)
        elif is_osd and nr == RECVFROM and ret == REQUEST:
            op.setdefault("osd_recv", ts)
        elif is_osd and nr == URING_ENTER and "submit" in op:
            op.setdefault("submitted", ts)
        elif is_osd and nr == SENDTO and ret == REPLY and "reply" in op:
            op.setdefault("replied", ts)
        elif is_client and nr == RECVFROM and ret == REPLY and "replied" in op:
            op["done"] = ts
            ops.append(op)
            op = None
    elif op and event == "block:block_rq_issue" and "submit" in op:
        op.setdefault("issue", ts)
    elif op and event == "io_uring:io_uring_complete" and "issue" in op:
        op.setdefault("done_disk", ts)

keys = ("sent", "osd_recv", "submit", "issue", "submitted", "done_disk", "reply", "replied")
full = [o for o in ops if all(k in o for k in keys)]
phases = [
    ("send", "sent", "client: send syscall"),
    ("sent", "osd_recv", "to the OSD having read the request"),
    ("osd_recv", "submit", "OSD: request to disk submission"),
    ("submit", "issue", "OSD: submission syscall to block issue"),
    ("issue", "done_disk", "disk: block issue to the OSD reaping it"),
    ("done_disk", "reply", "OSD: completion to reply"),
    ("reply", "replied", "OSD: reply send syscall"),
    ("replied", "done", "to the client having read the reply"),
    ("send", "done", "total"),
]
print(f"# {len(full)} reads followed whole ({len(ops)} seen); microseconds, under tracing; the phases add up to the total")
print(f"{'phase':<44} {'median':>7} {'p10':>7} {'p90':>7}")
for start, end, name in phases:
    xs = sorted(o[end] - o[start] for o in full)
    if xs:
        print(f"{name:<44} {statistics.median(xs):7.1f} {xs[len(xs) // 10]:7.1f} {xs[len(xs) * 9 // 10]:7.1f}")
kick = sorted(o["submitted"] - o["issue"] for o in full)
if kick:
    print(f"# of the disk's phase, block issue to the submission syscall's return (the virtual disk's doorbell): "
          f"median {statistics.median(kick):.1f} us")
