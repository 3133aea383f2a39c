import os, sys
sys.path.insert(0, "/work/main")
from star.policy import speeds, controller
MEM = int(os.environ.get("MEM", "4")); speeds._REVERT = os.environ.get("REVERT", "1") == "1"
_T = speeds.SpeedTracker
controller.SpeedTracker = lambda *a: _T(*a[:5], MEM)
sys.argv = sys.argv[1:]
exec(open(sys.argv[0]).read())
