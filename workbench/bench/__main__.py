"""`python -m workbench.bench --first-call-child OP SHAPE_SET`: the measured process of `workbench bench --first-call`."""

import sys

from .first_call import first_call_child

if len(sys.argv) != 4 or sys.argv[1] != "--first-call-child":
    sys.exit("usage: python -m workbench.bench --first-call-child OP SHAPE_SET (run by workbench bench --first-call)")
first_call_child(sys.argv[2], sys.argv[3])
