"""Capturing packets on host interfaces into one pcapng file (scapy's sniffer and
PcapNgWriter): one interface description block per port, named as the caller says
(``n1:iphy1``), and an optional comment per packet (the scenario time of a run)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


class Capture:
    """Packets of ``interfaces`` (host name -> label) into ``path`` until `stop`."""

    def __init__(self, interfaces: Mapping[str, str], path: Path,
                 comment: Callable[[float], str | None] = lambda t: None) -> None:
        # Lazy: scapy takes a second to import; only captures need it.
        logging.getLogger("scapy").setLevel(logging.ERROR)  # its warnings would be ours
        from scapy.sendrecv import AsyncSniffer
        from scapy.utils import PcapNgWriter

        self.labels = dict(interfaces)
        self.path = path
        self.packets = 0
        self._comment = comment
        self._lock = threading.Lock()
        self._writer = PcapNgWriter(str(path))
        started = threading.Event()
        self._sniffer = AsyncSniffer(iface=list(self.labels), prn=self._write, store=False,
                                     started_callback=started.set)
        self._sniffer.start()
        # The sockets are opened on the sniffer's thread: packets count once they are.
        if not started.wait(10):
            self._sniffer.stop(join=False)
            raise RuntimeError(f"the capture on {', '.join(self.labels)} did not start")

    def _write(self, packet: Any) -> None:
        label = self.labels.get(packet.sniffed_on, packet.sniffed_on)
        packet.sniffed_on = label
        text = self._comment(float(packet.time))
        if text is not None:
            packet.comments = [text.encode()]
        with self._lock:
            self._writer.write(packet)
            self.packets += 1

    def stop(self) -> int:
        """Stop sniffing, close the file; packets written."""
        if self._sniffer.running:
            self._sniffer.stop()
        with self._lock:
            self._writer.close()
        return self.packets
