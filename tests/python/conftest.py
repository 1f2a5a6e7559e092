import os
import sys

# The tests check errors: a timeout raises instead of ending the process (the default); tests of
# the default itself set the variable in the processes they start.
os.environ.setdefault("CCLX_ABORT_ON_ERROR", "0")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
# Build-tree mode (CCLX_EXT_DIR set): use the sources in python/; else the installed package.
if os.environ.get("CCLX_EXT_DIR") and os.path.join(ROOT, "python") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "python"))
