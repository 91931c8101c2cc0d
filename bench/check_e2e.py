#!/usr/bin/env python3
"""Checks what `bench/e2e/run EXPERIMENT --quick` wrote that does not depend
on timing (.ci/run's testbed steps).

Usage: python3 bench/check_e2e.py EXPERIMENT RESULT.json
EXPERIMENT is one of:
  coflow-trace  both schemes (flowtune-sebf, cubic) ran; no coflow left
                incomplete and no block failed
  spark         both schemes ran; no job failed, every scheme timed its
                shuffle stage, the answers are identical, and under the
                shim the allocator heard every executor (hellos >= 3,
                flowlet starts, coflow plans)
Exit 0 when every fact holds, 1 naming the field that failed, 2 on misuse.
"""
import sys

from check_lib import expect, run

SCHEMES = {"flowtune-sebf", "cubic"}


def coflow_trace(doc):
    s = doc["summary"]
    expect(set(s) == SCHEMES, "summary (schemes)", sorted(s), sorted(SCHEMES))
    for k, v in s.items():
        expect(not v["incomplete"], "summary[%s].incomplete" % k, v["incomplete"], "0")
        expect(not v["failed_blocks"], "summary[%s].failed_blocks" % k, v["failed_blocks"], "0")


def spark(doc):
    s = doc["summary"]
    expect(set(s) == SCHEMES, "summary (schemes)", sorted(s), sorted(SCHEMES))
    for k, v in s.items():
        expect(not v["failed_jobs"], "summary[%s].failed_jobs" % k, v["failed_jobs"], "0")
        expect(bool(v["shuffle_stage_s"]), "summary[%s].shuffle_stage_s" % k, v["shuffle_stage_s"],
               "a time")
    expect(bool(doc["answers_identical"]), "answers_identical", doc["answers_identical"], "true")
    # The executors ran under the shim: the allocator heard them and their flowlets.
    for i, m in enumerate(doc["details"]["shallow"]["flowtune-sebf"]):
        a = m["allocator"]
        where = "details.shallow.flowtune-sebf[%d].allocator" % i
        expect(bool(a), where, a, "the allocator's counters")
        expect(a["hellos"] >= 3, where + ".hellos", a["hellos"], ">= 3")
        for field in ("starts", "coflow_plans"):
            expect(a[field] > 0, "%s.%s" % (where, field), a[field], "> 0")


EXPERIMENTS = {"coflow-trace": coflow_trace, "spark": spark}


def check(doc, args):
    if args[0] not in EXPERIMENTS:
        raise KeyError("experiment %r (one of %s)" % (args[0], ", ".join(EXPERIMENTS)))
    EXPERIMENTS[args[0]](doc)


if __name__ == "__main__":
    sys.exit(run(check, __doc__, nargs=1))
