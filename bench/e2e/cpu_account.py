"""Host CPU of a testbed round, by component, from /proc (Linux only).

Every host of the testbed runs on this machine, so "host CPU" is the CPU of
the round's own processes plus the machine's softirq and irq time (where the
kernel's network receive path is charged). Other work on the machine (a
build, an editor) is not counted: only the listed processes and the
interrupt contexts are.

Components:
  allocator          the flowtune-allocator process
  endpoint_control   threads of the applications that run Flowtune's control
                     plane (libflowtune's runtime thread, "ft-runtime", its
                     link to a host agent, "ft-agent-link", and ZeroMQ's
                     "ZMQbg/*" threads), and the host agents (flowtune-agent)
  host_shaper        flowtune-pacer processes and their tc children
  applications       the rest of the applications' own user and system
                     time (the data path's system calls included)
  softirq_irq        the machine's softirq + irq time over the round (the
                     kernel's packet path, mostly)
"""
import os

TICK = os.sysconf("SC_CLK_TCK")
CONTROL_THREADS = ("ft-runtime", "ft-agent-link", "ZMQbg")


def _stat_fields(path):
    """utime + stime of /proc/.../stat, in seconds, and the comm."""
    with open(path) as f:
        raw = f.read()
    comm = raw[raw.index("(") + 1:raw.rindex(")")]
    rest = raw[raw.rindex(")") + 2:].split()
    # Fields after the comm: state is rest[0]; utime is field 14 overall.
    return (int(rest[11]) + int(rest[12])) / TICK, comm


def process_cpu_s(pid):
    """A live process's user + system seconds (all its threads), or 0."""
    try:
        return _stat_fields("/proc/%d/stat" % pid)[0]
    except (OSError, ValueError, IndexError):
        return 0.0


def control_threads_cpu_s(pid):
    """User + system seconds of pid's Flowtune control threads."""
    total = 0.0
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return 0.0
    for tid in tids:
        try:
            cpu, comm = _stat_fields("/proc/%d/task/%s/stat" % (pid, tid))
        except (OSError, ValueError, IndexError):
            continue
        if comm.startswith(CONTROL_THREADS):
            total += cpu
    return total


def children(pid):
    """Direct children of pid (every thread's)."""
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def interrupt_cpu_s():
    """The machine's softirq + irq seconds since boot."""
    with open("/proc/stat") as f:
        cpu = f.readline().split()
    # cpu user nice system idle iowait irq softirq ...
    return (int(cpu[6]) + int(cpu[7])) / TICK


class Round:
    """Counts one round: call start() before it, take_*() while the
    processes live, and result() at the end."""

    def __init__(self):
        self.parts = {"allocator": 0.0, "endpoint_control": 0.0, "host_shaper": 0.0,
                      "applications": 0.0, "softirq_irq": 0.0}
        self.irq0 = None

    def start(self):
        self.irq0 = interrupt_cpu_s()

    def stop(self):
        """The end of the round's interrupt window: call it where the
        processes are sampled, before teardown."""
        if self.irq0 is not None:
            self.parts["softirq_irq"] = interrupt_cpu_s() - self.irq0
            self.irq0 = None

    def take_shaper(self, pid):
        self.parts["host_shaper"] += process_cpu_s(pid) + sum(process_cpu_s(c) for c in children(pid))

    def take_application(self, pid):
        """A live application: its control threads apart from the rest."""
        control = control_threads_cpu_s(pid)
        self.parts["endpoint_control"] += control
        self.parts["applications"] += max(0.0, process_cpu_s(pid) - control)

    def take_agent(self, pid):
        """A live host agent: all of it is endpoint control."""
        self.parts["endpoint_control"] += process_cpu_s(pid)

    def add_application_s(self, seconds):
        """An application that ended (its rusage), with no control plane."""
        self.parts["applications"] += seconds

    def result(self, delivered_bytes):
        """Seconds per component, the total, and CPU-seconds per GB."""
        self.stop()  # if the round did not
        total = sum(self.parts.values())
        gb = delivered_bytes / 1e9
        out = {"cpu_s": round(total, 3), "cpu_s_by_component": {k: round(v, 3) for k, v in self.parts.items()}}
        out["cpu_s_per_gb"] = round(total / gb, 3) if gb > 0 else None
        return out
