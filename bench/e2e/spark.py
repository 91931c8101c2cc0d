"""Spark on the namespace testbed, for `bench/e2e/run spark`.

A standalone Spark cluster (master and driver on one host, a worker on each
of the others, one 1-core executor per worker) runs bench/e2e/spark_job.py,
whose one shuffle moves every row between the workers through the shaped
links. Under Flowtune the workers run under flowtune-run, so the executors
they start inherit the shim (LD_PRELOAD and FLOWTUNE_*) and every socket
write of theirs (Netty's block transfers: write, writev, sendfile) is a
flowlet. With a coflow id, the application sets FLOWTUNE_COFLOW in its
executors' environment (spark.executorEnv), one id per application: the job
has one shuffle, so that is the shuffle stage's coflow.

The shuffle stage's time comes from Spark's event log: the stage that reads
remote shuffle blocks, from its submission to its completion.
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import time

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spark_job.py")
DEFAULT_VENV = "/opt/flowtune-spark"
MASTER_PORT = 7077
MASTER_UI_PORT = 8080
LOG4J = """# bench/e2e/spark.py: Spark's own logging at WARN, to files.
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
"""


def find_spark_home():
    """SPARK_HOME, else the venv scripts/install-spark.sh makes; None if
    neither holds a Spark."""
    venv = os.environ.get("FLOWTUNE_SPARK_VENV", DEFAULT_VENV)
    cands = [os.environ.get("SPARK_HOME")] + sorted(
        glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "pyspark")))
    for c in cands:
        if c and os.access(os.path.join(c, "bin", "spark-class"), os.X_OK):
            return c
    return None


def python_of(spark_home):
    """The Python that has pyspark: the venv's when Spark came from one."""
    venv_py = os.path.join(spark_home, "..", "..", "..", "..", "bin", "python")
    # normpath, not realpath: the venv's python is a link whose target
    # would not see the venv's packages.
    return os.path.normpath(venv_py) if os.access(venv_py, os.X_OK) else "python3"


def event_lines(path):
    """The lines of the event log at `path`: a file, or a rolling log's
    folder (eventlog_v2_APP/events_N_APP, in N order)."""
    if not os.path.isdir(path):
        with open(path) as f:
            yield from f
        return
    def index(name):
        parts = name.split("_")
        return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 0
    for name in sorted((n for n in os.listdir(path) if n.startswith("events_")), key=index):
        with open(os.path.join(path, name)) as f:
            yield from f


def event_log_stages(path):
    """Per stage of the event log at `path`: {job, submit_s, complete_s,
    duration_s, tasks, write_bytes, remote_bytes, local_bytes,
    fetch_wait_s, failed}."""
    stages, job_of = {}, {}
    for line in event_lines(path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        kind = e.get("Event")
        if kind == "SparkListenerJobStart":
            for sid in e.get("Stage IDs", []):
                job_of[sid] = e["Job ID"]
        elif kind == "SparkListenerTaskEnd":
            s = stages.setdefault(e["Stage ID"], _stage())
            m = e.get("Task Metrics") or {}
            rd = m.get("Shuffle Read Metrics") or {}
            wr = m.get("Shuffle Write Metrics") or {}
            s["tasks"] += 1
            s["write_bytes"] += wr.get("Shuffle Bytes Written", 0)
            s["remote_bytes"] += rd.get("Remote Bytes Read", 0)
            s["local_bytes"] += rd.get("Local Bytes Read", 0)
            s["fetch_wait_s"] += rd.get("Fetch Wait Time", 0) / 1e3
            if (e.get("Task End Reason") or {}).get("Reason", "Success") != "Success":
                s["failed"] += 1
        elif kind == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            s = stages.setdefault(info["Stage ID"], _stage())
            if "Submission Time" in info and "Completion Time" in info:
                s["submit_s"] = info["Submission Time"] / 1e3
                s["complete_s"] = info["Completion Time"] / 1e3
                s["duration_s"] = s["complete_s"] - s["submit_s"]
            if info.get("Failure Reason"):
                s["failed"] += 1
    for sid, s in stages.items():
        s["job"] = job_of.get(sid)
    return stages


def _stage():
    return {"tasks": 0, "write_bytes": 0, "remote_bytes": 0, "local_bytes": 0,
            "fetch_wait_s": 0.0, "failed": 0, "submit_s": None, "complete_s": None,
            "duration_s": None}


def shuffle_of(stages):
    """The job that shuffled most bytes: its map stage (the writer), its
    shuffle stage (the reader of remote blocks) and their figures; None if
    no stage wrote shuffle bytes."""
    jobs = {}
    for sid, s in stages.items():
        jobs.setdefault(s["job"], []).append((sid, s))
    best = max(jobs.values(), key=lambda ss: sum(s["write_bytes"] for _, s in ss), default=None)
    if not best or not any(s["write_bytes"] for _, s in best):
        return None
    write = max(best, key=lambda x: x[1]["write_bytes"])[1]
    read = max(best, key=lambda x: x[1]["remote_bytes"] + x[1]["local_bytes"])[1]
    if read is write or read["duration_s"] is None or write["duration_s"] is None:
        return None
    return {"map_stage_s": write["duration_s"], "shuffle_stage_s": read["duration_s"],
            "job_s": read["complete_s"] - write["submit_s"],
            "shuffle_bytes": write["write_bytes"], "remote_bytes": read["remote_bytes"],
            "local_bytes": read["local_bytes"], "fetch_wait_s": read["fetch_wait_s"],
            "tasks": write["tasks"] + read["tasks"],
            "failed_tasks": sum(s["failed"] for _, s in best)}


class Cluster:
    """Master (and driver) on `master`, a worker on each of `workers`
    (testbed host numbers), under `scheme`. Everything it started, and
    anything left in the workers' namespaces, is gone after stop()."""

    def __init__(self, tb, addr, spark_home, work, master, workers, worker_prefix=None,
                 log=print):
        self.tb, self.addr, self.home, self.work = tb, addr, spark_home, work
        self.master, self.workers = master, workers
        # worker_prefix(host): what the worker's command line starts with
        # (flowtune-run and its flags).
        self.worker_prefix = worker_prefix or (lambda h: [])
        self.log = log
        self.procs = []
        self.conf = os.path.join(work, "conf")
        os.makedirs(self.conf, exist_ok=True)
        with open(os.path.join(self.conf, "log4j2.properties"), "w") as f:
            f.write(LOG4J)

    def env(self, host):
        e = {"SPARK_HOME": self.home, "SPARK_CONF_DIR": self.conf,
             "SPARK_LOCAL_IP": self.addr(host), "SPARK_LOCAL_HOSTNAME": self.addr(host),
             "SPARK_LOG_DIR": os.path.join(self.work, "logs"),
             "SPARK_WORKER_DIR": os.path.join(self.work, "worker-h%d" % host),
             "SPARK_DAEMON_MEMORY": "512m", "PYSPARK_PYTHON": python_of(self.home),
             "PYSPARK_DRIVER_PYTHON": python_of(self.home)}
        return e

    def url(self):
        return "spark://%s:%d" % (self.addr(self.master), MASTER_PORT)

    def _start(self, host, argv, env, name):
        out = open(os.path.join(self.work, name + ".log"), "w")
        p = self.tb.popen("h%d" % host, argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append((host, p, out))
        return p

    def start(self, memory="1500m", cores=1, timeout=60):
        cls = os.path.join(self.home, "bin", "spark-class")
        self._start(self.master, [cls, "org.apache.spark.deploy.master.Master",
                                  "--host", self.addr(self.master), "--port", str(MASTER_PORT),
                                  "--webui-port", str(MASTER_UI_PORT)],
                    self.env(self.master), "master")
        for h in self.workers:
            self._start(h, self.worker_prefix(h) + [
                cls, "org.apache.spark.deploy.worker.Worker", "--host", self.addr(h),
                "--cores", str(cores), "--memory", memory, "--webui-port", "0",
                "--work-dir", os.path.join(self.work, "worker-h%d" % h), self.url()],
                self.env(h), "worker-h%d" % h)
        deadline = time.time() + timeout
        while time.time() < deadline:
            alive = self.alive_workers()
            if alive == len(self.workers):
                return
            for host, p, _ in self.procs:
                if p.poll() is not None:
                    raise RuntimeError("a Spark daemon on h%d exited (%s); see %s" % (
                        host, p.returncode, self.work))
            time.sleep(0.5)
        raise RuntimeError("only %s of %d Spark workers registered within %d s; logs in %s" % (
            self.alive_workers(), len(self.workers), timeout, self.work))

    def alive_workers(self):
        r = subprocess.run(["ip", "netns", "exec", self.tb.ns("h%d" % self.master), "curl", "-s",
                            "-m", "2", "http://%s:%d/json/" % (self.addr(self.master), MASTER_UI_PORT)],
                           capture_output=True, text=True)
        try:
            return json.loads(r.stdout).get("aliveworkers", 0)
        except ValueError:
            return 0

    def submit(self, args, conf, timeout, name):
        """Runs the job; returns (exit status, its JSON answer or None,
        its event log's path or None)."""
        events = os.path.join(self.work, "events-" + name)
        os.makedirs(events, exist_ok=True)
        answer = os.path.join(self.work, "answer-%s.json" % name)
        base = {"spark.master": self.url(), "spark.driver.host": self.addr(self.master),
                "spark.driver.memory": "1g", "spark.executor.memory": "1g",
                "spark.executor.cores": "1", "spark.cores.max": str(len(self.workers)),
                "spark.eventLog.enabled": "true", "spark.eventLog.dir": "file://" + events,
                "spark.eventLog.compress": "false", "spark.ui.enabled": "false",
                "spark.sql.adaptive.enabled": "false",
                # Every executor up before the first task, so every run
                # places its tasks alike.
                "spark.scheduler.minRegisteredResourcesRatio": "1.0",
                "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s"}
        base.update(conf)
        argv = [os.path.join(self.home, "bin", "spark-submit")]
        for k, v in sorted(base.items()):
            argv += ["--conf", "%s=%s" % (k, v)]
        argv += [JOB, "--out", answer] + list(args)
        with open(os.path.join(self.work, "driver-%s.log" % name), "w") as out:
            # Its own process group: spark-submit's JVM runs the Python
            # driver as a child, which a timeout must take down too.
            p = self.tb.popen("h%d" % self.master, argv, env=self.env(self.master),
                              stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            rc = None
            try:
                rc = p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
            finally:
                if rc is None:  # timed out, or interrupted: nothing of it stays
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    p.wait()
        result = None
        try:
            with open(answer) as f:
                result = json.load(f)
        except (OSError, ValueError):
            pass  # no answer, or one cut short: the job failed
        logs = [x for x in glob.glob(os.path.join(events, "*")) if not x.endswith(".inprogress")]
        logs += glob.glob(os.path.join(events, "*.inprogress"))
        return rc, result, (logs[0] if logs else None)

    def stop(self):
        for _, p, _ in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for _, p, out in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            out.close()
        # Executors are the workers' children; a worker killed before its
        # shutdown hook ran leaves them. Only JVMs: a host's pacer stays.
        for h in [self.master] + list(self.workers):
            ns = self.tb.ns("h%d" % h)
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    with open("/proc/%s/comm" % pid) as f:
                        if f.read().strip() == "java":
                            os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
        self.procs = []


def remove(path):
    shutil.rmtree(path, ignore_errors=True)
