"""Walker-delta shells as element sets (i: t/p/f), written as TLEs like Hypatia does.

A shell ``ALT_KM:INC_DEG:PLANES:SATS_PER_PLANE:PHASE`` has PLANES planes spread evenly
over 360° of right ascension, SATS_PER_PLANE satellites evenly spaced in each, and
satellite s of plane p at mean anomaly 360°·(s/S + PHASE·p/(P·S)). Orbits are circular
(eccentricity 1e-7, argument of perigee 0), at ALT_KM above the WGS72 equatorial radius
(6378.135 km, the constants SGP4 propagates with), their mean motion Kepler's
sqrt(mu/a³) with WGS72's mu. The element sets are made with ``Satrec.sgp4init`` and
turned into TLE lines by ``sgp4.exporter``; the scenario is then propagated from those
lines, so a TLE file written with ``--write-tle`` gives exactly the same orbits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from sgp4.api import WGS72, Satrec, jday
from sgp4.exporter import export_tle

from nestednet.errors import UsageError
from nestednet.orbits.tle import Tle

WGS72_RADIUS_KM = 6378.135
WGS72_MU_KM3_PER_S2 = 398600.8
ECCENTRICITY = 1e-7
SGP4_EPOCH_JD = 2433281.5
"""SGP4's epoch origin: 1949 December 31 00:00 UT."""
MIN_ALTITUDE_KM = 150.0
MAX_ALTITUDE_KM = 40000.0


@dataclass(frozen=True)
class WalkerShell:
    altitude_km: float
    inclination_deg: float
    planes: int
    per_plane: int
    phase: int

    @property
    def size(self) -> int:
        return self.planes * self.per_plane

    def mean_motion_rad_per_min(self) -> float:
        a = WGS72_RADIUS_KM + self.altitude_km
        return math.sqrt(WGS72_MU_KM3_PER_S2 / a**3) * 60.0


def parse_walker(text: str) -> WalkerShell:
    """``ALT_KM:INC_DEG:PLANES:SATS_PER_PLANE:PHASE``; UsageError saying which part is bad."""
    where = f"--walker {text!r}"
    parts = text.split(":")
    if len(parts) != 5:
        raise UsageError(f"{where}: expected ALT_KM:INC_DEG:PLANES:SATS_PER_PLANE:PHASE "
                         f"(5 parts), got {len(parts)}", hint="e.g. --walker 550:53:72:22:1")
    try:
        alt, inc = float(parts[0]), float(parts[1])
        planes, per_plane, phase = int(parts[2]), int(parts[3]), int(parts[4])
    except ValueError:
        raise UsageError(f"{where}: ALT_KM and INC_DEG are numbers, PLANES, SATS_PER_PLANE "
                         "and PHASE whole numbers") from None
    checks = [
        (math.isfinite(alt) and MIN_ALTITUDE_KM <= alt <= MAX_ALTITUDE_KM,
         f"altitude {parts[0]} km is outside {MIN_ALTITUDE_KM:g}..{MAX_ALTITUDE_KM:g}"),
        (math.isfinite(inc) and 0 <= inc <= 180, f"inclination {parts[1]}° is outside 0..180"),
        (planes >= 1, f"PLANES must be at least 1, got {planes}"),
        (per_plane >= 1, f"SATS_PER_PLANE must be at least 1, got {per_plane}"),
        (0 <= phase < max(planes, 1), f"PHASE must be 0..PLANES-1 ({planes - 1}), got {phase}"),
    ]
    for ok, message in checks:
        if not ok:
            raise UsageError(f"{where}: {message}")
    return WalkerShell(alt, inc, planes, per_plane, phase)


def satellite_name(shell_index: int, plane: int, slot: int) -> str:
    """Shell, plane and slot, all from 1: ``w1p3s11``."""
    return f"w{shell_index}p{plane}s{slot}"


def shell_tles(shell: WalkerShell, shell_index: int, epoch: datetime,
               first_catalog_number: int) -> list[Tle]:
    """The shell's satellites as TLEs with epoch ``epoch`` (timezone-aware, UTC)."""
    jd, fr = jday(epoch.year, epoch.month, epoch.day, epoch.hour, epoch.minute,
                  epoch.second + epoch.microsecond / 1e6)
    n = shell.mean_motion_rad_per_min()
    total = shell.size
    tles = []
    for p in range(shell.planes):
        raan = 2 * math.pi * p / shell.planes
        for s in range(shell.per_plane):
            mean_anomaly = 2 * math.pi * (s / shell.per_plane + shell.phase * p / total)
            satrec = Satrec()
            satrec.sgp4init(WGS72, "i", first_catalog_number + len(tles),
                            (jd - SGP4_EPOCH_JD) + fr, 0.0, 0.0, 0.0, ECCENTRICITY, 0.0,
                            math.radians(shell.inclination_deg), mean_anomaly % (2 * math.pi),
                            n, raan)
            line1, line2 = export_tle(satrec)
            tles.append(Tle(name=satellite_name(shell_index, p + 1, s + 1), line1=line1,
                            line2=line2, source=f"--walker {shell_index}"))
    return tles


def grid_neighbours(shells: list[WalkerShell]) -> list[tuple[str, str]]:
    """The +Grid: each satellite with the next in its plane and the same slot in the next
    plane (wrapping around), i.e. four ISLs per satellite, as StarryNet and Hypatia."""
    pairs: set[tuple[str, str]] = set()
    for k, shell in enumerate(shells, start=1):
        for p in range(shell.planes):
            for s in range(shell.per_plane):
                here = satellite_name(k, p + 1, s + 1)
                ahead = satellite_name(k, p + 1, (s + 1) % shell.per_plane + 1)
                beside = satellite_name(k, (p + 1) % shell.planes + 1, s + 1)
                for other in (ahead, beside):
                    if other != here:
                        pairs.add((min(here, other), max(here, other)))
    return sorted(pairs)
