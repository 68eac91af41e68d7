"""`python -m kubetrain.runtime.store PORT`: the rendezvous store of a local run, in a process of its own.

torchrun's c10d rendezvous keeps its TCPStore inside the agent that hosts it (`is_host`). That agent exits
as soon as it is done, while another agent may still be closing the rendezvous or sending it a keep-alive
heartbeat: that agent then prints a C++ `recvVector failed` stack trace and a RendezvousConnectionError,
although the run succeeded. `kubetrain run` therefore hosts the store here, stops this process only after
every agent has exited, and starts all agents as clients (`is_host=0`).
"""

from __future__ import annotations

import sys
import time

from torch.distributed import TCPStore  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> int:
    port = int((sys.argv[1:] if argv is None else argv)[0])
    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    while store:  # until `kubetrain run` stops this process (SIGTERM), or dies (PR_SET_PDEATHSIG)
        time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
