"""A script-mode job that only sleeps (and may ignore SIGTERM), for the process-cleanup tests."""

import os
import signal
import time

if os.environ.get("IGNORE_SIGTERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(f"sleeping rank {os.environ['RANK']} pid {os.getpid()}", flush=True)
time.sleep(600)
