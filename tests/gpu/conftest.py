import os
import sys

# The tests check errors: a timeout raises instead of ending the process (the default); tests of
# the default itself set the variable in the processes they start.
os.environ.setdefault("CCLX_ABORT_ON_ERROR", "0")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (HERE, os.path.join(ROOT, "tests", "python")):
    if p not in sys.path:
        sys.path.insert(0, p)
if os.environ.get("CCLX_EXT_DIR") and os.path.join(ROOT, "python") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "python"))
