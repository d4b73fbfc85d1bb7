"""Where each satellite is, and how high it stands over each ground station.

Propagation is the ``sgp4`` library's C++ ``SatrecArray`` (TEME, km); TEME to ITRS
(Earth-fixed, polar motion neglected) is skyfield's ``TEME_to_ITRF``, with UT1 from
skyfield's built-in timescale (``load.timescale(builtin=True)``: no file is
downloaded, nothing touches the network). Elevations are skyfield's too: the
satellite's ITRS position and the station's WGS84 position, differenced, in the
station's horizon frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import cache

import numpy as np
from sgp4.api import SGP4_ERRORS, SatrecArray, jday
from skyfield.api import load, wgs84
from skyfield.framelib import itrs
from skyfield.positionlib import Geocentric
from skyfield.sgp4lib import TEME_to_ITRF
from skyfield.units import Distance, Velocity

from nestednet.errors import UsageError
from nestednet.orbits.stations import GroundStation
from nestednet.orbits.tle import Tle


@cache
def timescale():  # type: ignore[no-untyped-def]
    """Skyfield's timescale from the tables shipped inside skyfield (no download)."""
    return load.timescale(builtin=True)


def times(start: datetime, offsets_s: Sequence[float]):  # type: ignore[no-untyped-def]
    """Skyfield times ``start + offset`` for each offset (seconds)."""
    start = start.astimezone(UTC)
    seconds = start.second + start.microsecond / 1e6 + np.asarray(offsets_s, dtype=float)
    return timescale().utc(start.year, start.month, start.day, start.hour, start.minute,
                           seconds)


def itrs_positions_km(satellites: Sequence[Tle], start: datetime,
                      offsets_s: Sequence[float]) -> np.ndarray:
    """Positions in ITRS km, shape (satellites, steps, 3).

    UsageError naming the satellite, the step and SGP4's error code when SGP4 cannot
    propagate an object at some step (decayed, eccentricity out of range, ...).
    """
    utc = start.astimezone(UTC)
    jd0, fr0 = jday(utc.year, utc.month, utc.day, utc.hour, utc.minute,
                    utc.second + utc.microsecond / 1e6)
    offsets = np.asarray(offsets_s, dtype=float)
    jd = np.full(offsets.shape, jd0)
    fr = fr0 + offsets / 86400.0
    errors, r_teme, v_teme = SatrecArray([s.satrec() for s in satellites]).sgp4(jd, fr)
    bad = np.argwhere(errors != 0)
    if bad.size:
        i, k = (int(x) for x in bad[0])
        code = int(errors[i, k])
        when = (utc + timedelta(seconds=float(offsets[k]))).isoformat()
        where = f"{satellites[i].source}:{satellites[i].line_number}: " \
            if satellites[i].line_number else ""
        raise UsageError(f"{where}satellite {satellites[i].name!r}: SGP4 error {code} at step "
                         f"{k} (t = {offsets[k]:g} s, {when}): "
                         f"{SGP4_ERRORS.get(code, 'unknown error')}; nothing written",
                         hint="drop the object or choose a start time near its TLE epoch")
    t = times(start, offsets)
    out = np.empty_like(r_teme)
    for i in range(len(satellites)):
        r_itrs, _ = TEME_to_ITRF(t.whole, r_teme[i].T, v_teme[i].T, 0.0, 0.0, t.ut1_fraction)
        out[i] = np.asarray(r_itrs).T
    return out


def station_itrs_km(station: GroundStation) -> np.ndarray:
    """The station's ITRS position in km (WGS84)."""
    return np.asarray(_place(station).itrs_xyz.km)


def elevations_deg(station: GroundStation, satellites_km: np.ndarray,
                   start: datetime) -> np.ndarray:
    """Elevation of each satellite above the station's horizon, shape (satellites, steps).

    Skyfield's station frame (``rotation_at``: GCRS to the local horizon) composed with
    the inverse of its ITRS frame's rotation is the fixed ITRS-to-horizon rotation, so
    one evaluation serves every step.
    """
    place = _place(station)
    t = times(start, [0.0])
    to_horizon = np.einsum("ijk,ljk->il", place.rotation_at(t), itrs.rotation_at(t))
    local = (satellites_km - np.asarray(place.itrs_xyz.km)) @ to_horizon.T
    up = local[..., 2] / np.linalg.norm(local, axis=-1)
    return np.degrees(np.arcsin(np.clip(up, -1.0, 1.0)))


def _place(station: GroundStation):  # type: ignore[no-untyped-def]
    return wgs84.latlon(station.lat, station.lon, elevation_m=station.alt_m)


def geodetic_latlon(points_km: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    """WGS84 geodetic latitude and longitude (degrees) of ITRS points in km (skyfield)."""
    xyz = np.asarray(points_km, dtype=float).T
    t = times(datetime(2000, 1, 1, tzinfo=UTC), np.zeros(xyz.shape[1]))
    position = Geocentric.from_time_and_frame_vectors(t, itrs, Distance(km=xyz),
                                                      Velocity(km_per_s=np.zeros_like(xyz)))
    lat, lon = wgs84.latlon_of(position)
    return np.asarray(lat.degrees), np.asarray(lon.degrees)
