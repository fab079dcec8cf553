"""A writer of the kill tests (tests/kills.rs): writes records of REC bytes into FILE, each
once, in a random order, those of spawn S being S, S + STRIDE, S + 2 STRIDE, ... so that every
page holds records of several writers. Says "w R" once the pwrite of record R returned and
"s" after every 4th, once an fdatasync returned; every 8th write it reads back one of its
own records and says "bad R" (and exits 1) if it is not what it wrote. Says "done" after
PER records, then waits for a line on stdin. Usage: kill_writer.py FILE S"""
import os
import random
import sys

REC, STRIDE, PER = 1000, 128, 200


def record(r):
    head = b"%010d|" % r
    return head + bytes((r + i) % 251 for i in range(REC - len(head)))


def say(line):
    # One write(2) each: a process killed mid-line would leave half of one.
    os.write(1, line.encode() + b"\n")


def main():
    path, spawn = sys.argv[1], int(sys.argv[2])
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    rng = random.Random(spawn)
    mine = [spawn + STRIDE * j for j in range(PER)]
    rng.shuffle(mine)
    for n, r in enumerate(mine):
        os.pwrite(fd, record(r), r * REC)
        say("w %d" % r)
        if n % 4 == 3:
            os.fdatasync(fd)
            say("s")
        if n % 8 == 7:
            back = mine[rng.randrange(n + 1)]
            if os.pread(fd, REC, back * REC) != record(back):
                say("bad %d" % back)
                sys.exit(1)
    say("done")
    sys.stdin.readline()


if __name__ == "__main__":
    main()
