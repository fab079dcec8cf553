"""Runs `upcache bench --json`, optionally inside a cgroup v1 memory limit (for the kernel
page cache capped to upcache's budget). Shared by the comparison scripts in bench/."""

import json
import os
import subprocess

UPCACHE = os.path.join(os.path.dirname(__file__), "..", "target", "release", "upcache")
CGROUP = "/sys/fs/cgroup/memory/upcache-bench"


def upcache(args, cgroup_limit=None):
    """The reports of one `upcache bench --json ARGS` run, as a list."""
    cmd = [UPCACHE, "bench", "--json"] + args
    pre = None
    if cgroup_limit is not None:
        os.makedirs(CGROUP, exist_ok=True)
        with open(os.path.join(CGROUP, "memory.limit_in_bytes"), "w") as f:
            f.write(str(cgroup_limit))

        def pre():
            with open(os.path.join(CGROUP, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    out = subprocess.run(cmd, check=True, capture_output=True, text=True, preexec_fn=pre).stdout
    reports = json.loads(out)
    return reports if isinstance(reports, list) else [reports]
