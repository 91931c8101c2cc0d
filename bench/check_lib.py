"""Shared by the bench/check_*.py scripts: each checks the facts of one
benchmark's JSON that do not depend on timing, and on failure names the
field that failed, its value and what was expected.

A checker defines `check(doc, args)` that calls `expect(...)`, and ends with
`sys.exit(run(check, __doc__))`. Exit status: 0 when every fact holds, 1 when
one does not (or a field is missing), 2 on a usage error.
"""
import json
import os
import sys


class CheckFailed(Exception):
    pass


def expect(cond, field, value, want):
    """Fails the check unless `cond`: FIELD = VALUE, expected WANT."""
    if not cond:
        raise CheckFailed("%s = %r, expected %s" % (field, value, want))


def run(check, doc, nargs=0):
    """Runs `check(json_doc, extra_args)` on the JSON file named last on the
    command line, after `nargs` leading arguments."""
    name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    args = sys.argv[1:]
    if len(args) != nargs + 1 or args[0] in ("-h", "--help"):
        print(doc.strip(), file=sys.stderr if len(args) != 1 else sys.stdout)
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    try:
        with open(args[-1]) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print("%s: %s: %s" % (name, args[-1], e), file=sys.stderr)
        return 1
    try:
        check(data, args[:-1])
    except CheckFailed as e:
        print("%s: %s: %s" % (name, args[-1], e), file=sys.stderr)
        return 1
    except (KeyError, IndexError, TypeError) as e:
        print("%s: %s: missing or malformed field %s" % (name, args[-1], e), file=sys.stderr)
        return 1
    return 0
