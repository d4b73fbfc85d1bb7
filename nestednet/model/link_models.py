"""Link models: a link's properties as a pure function of the two ends' positions.

A model is declared as ``{"model": NAME, "params": {...}}`` (in a scenario's
``link_model`` or in a file given with ``--link-model``). Positions reach a model
in metres (the caller converts from the scenario's length unit); a model returns
the properties of the direction from ``a`` to ``b``, or None when the two cannot
link at all (a laser beyond its range).

Built-ins (every parameter's unit is in its name and its description):

- ``fixed``: the same properties whatever the distance.
- ``propagation``: delay = distance / propagation speed (c by default).
- ``free-space``: propagation delay; received power from the Friis free-space
  path loss (FSPL); SNR against a noise floor; rate = Shannon capacity times an
  efficiency factor, capped; loss from a logistic curve of the SNR.
- ``laser``: inter-satellite optical link: a fixed rate up to a maximum range,
  delay from the distance, no link beyond the range.

Adding a model: subclass LinkModel, list its PARAMS, implement ``from_params`` and
``properties``, and decorate the class with ``@register``. Its parameters are then
validated by the schema ``schema()`` builds from the registry; the shipped
``nestednet/schemas/link-model.schema.json`` is that schema for the built-ins (a
unit test keeps the two equal).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from nestednet.model.line_of_sight import Position
from nestednet.model.link_properties import (
    LinkProperties,
    PropertyError,
    parse_properties,
    seconds_to_us,
)
from nestednet.model.units import parse_rate

SPEED_OF_LIGHT_M_PER_S = 299_792_458.0
THERMAL_NOISE_DBM_PER_HZ = -174.0
"""kT at 290 K: -173.98 dBm/Hz, rounded as link budgets do."""
MIN_RATE_BPS = 1000
"""A shaper needs a positive rate: a free-space link at or below 1 kbit/s gets 1 kbit/s."""

SCHEMA_ID = "https://nestednet.example/schemas/link-model.schema.json"


class ModelError(ValueError):
    """A bad parameter; ``path`` is where it sits inside the model document."""

    def __init__(self, path: list[str | int], message: str) -> None:
        super().__init__(message)
        self.path = path


@dataclass(frozen=True)
class Param:
    """One model parameter as the file spells it: JSON Schema type, default, meaning and unit."""

    name: str
    schema: Mapping[str, Any]
    description: str
    default: Any = None

    def json_schema(self) -> dict[str, Any]:
        out = dict(self.schema) | {"description": self.description}
        if self.default is not None:
            out["default"] = self.default
        return out


def _rate_param(default: str | None, meaning: str) -> Param:
    return Param("rate", {"type": "string"}, f"{meaning}, with a unit: '20Mbit', '1Gbit' "
                                              "(bit/s; k/M/G decimal)", default)


_TIME = {"type": ["string", "integer"]}
JITTER = Param("jitter", _TIME, "Delay variation (uniform, netem), with a unit: '1ms', '500us'",
               "0")
LOSS = Param("loss", {"type": ["string", "number"]}, "Packet loss: '0.5%' or a bare percentage",
             "0")
SPEED = Param("speed_m_per_s", {"type": "number", "exclusiveMinimum": 0},
              "Propagation speed in m/s (c in vacuum; about 2e8 in fibre)",
              SPEED_OF_LIGHT_M_PER_S)


class LinkModel(ABC):
    """The interface: parameters in, properties of a->b as a function of positions out."""

    NAME: ClassVar[str]
    SUMMARY: ClassVar[str]
    PARAMS: ClassVar[tuple[Param, ...]]
    USES_DISTANCE: ClassVar[bool] = True
    """False for a model that ignores positions (it then needs no length unit)."""

    @classmethod
    @abstractmethod
    def from_params(cls, params: Mapping[str, Any]) -> LinkModel:
        """Build from a schema-checked params object; ModelError for bad values."""

    @abstractmethod
    def properties(self, a: Position, b: Position) -> LinkProperties | None:
        """Properties of the direction a -> b; positions in metres; None: cannot link."""

    def document(self) -> dict[str, Any]:
        """The declaration this model was built from, for writing it back to a file."""
        return {"model": self.NAME, "params": dict(getattr(self, "params", {}))}


REGISTRY: dict[str, type[LinkModel]] = {}


def register(cls: type[LinkModel]) -> type[LinkModel]:
    """Class decorator: make a model available by its NAME in files and on the CLI."""
    REGISTRY[cls.NAME] = cls
    return cls


def _with_defaults(cls: type[LinkModel], params: Mapping[str, Any]) -> dict[str, Any]:
    return {p.name: params.get(p.name, p.default) for p in cls.PARAMS}


def _properties(values: Mapping[str, Any], fields: tuple[str, ...]) -> LinkProperties:
    """The unit-string properties among the params, errors located at params.<field>."""
    try:
        return parse_properties({f: values[f] for f in fields if values.get(f) is not None})
    except PropertyError as exc:
        raise ModelError(["params", exc.field], str(exc)) from None


@register
@dataclass(frozen=True)
class Fixed(LinkModel):
    NAME: ClassVar[str] = "fixed"
    SUMMARY: ClassVar[str] = "The same properties for every link, whatever the distance."
    PARAMS: ClassVar[tuple[Param, ...]] = (
        _rate_param(None, "Rate of each direction (omitted: not limited)"),
        Param("delay", _TIME, "One-way delay, with a unit: '5ms', '250us'", "0"),
        JITTER, LOSS,
    )
    USES_DISTANCE: ClassVar[bool] = False
    link: LinkProperties
    params: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Fixed:
        values = _with_defaults(cls, params)
        return cls(_properties(values, ("rate", "delay", "jitter", "loss")), dict(params))

    def properties(self, a: Position, b: Position) -> LinkProperties:
        return self.link


@register
@dataclass(frozen=True)
class Propagation(LinkModel):
    NAME: ClassVar[str] = "propagation"
    SUMMARY: ClassVar[str] = "Delay = distance / propagation speed; rate, jitter, loss fixed."
    PARAMS: ClassVar[tuple[Param, ...]] = (
        _rate_param(None, "Rate of each direction (omitted: not limited)"),
        SPEED, JITTER, LOSS,
    )
    base: LinkProperties
    speed_m_per_s: float = SPEED_OF_LIGHT_M_PER_S
    params: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Propagation:
        values = _with_defaults(cls, params)
        base = _with_jitter_as_delay(values)
        return cls(base, float(values["speed_m_per_s"]), dict(params))

    def properties(self, a: Position, b: Position) -> LinkProperties:
        return _delayed(self.base, propagation_delay_s(a, b, self.speed_m_per_s))


@register
@dataclass(frozen=True)
class FreeSpace(LinkModel):
    NAME: ClassVar[str] = "free-space"
    SUMMARY: ClassVar[str] = ("Friis free-space path loss -> SNR -> Shannon rate x efficiency "
                              "(capped) and logistic loss; propagation delay.")
    PARAMS: ClassVar[tuple[Param, ...]] = (
        Param("frequency_hz", {"type": "number", "exclusiveMinimum": 0},
              "Carrier frequency in Hz (2.4e9 for 2.4 GHz Wi-Fi)", 2.4e9),
        Param("tx_power_dbm", {"type": "number"}, "Transmit power in dBm (20 dBm = 100 mW)",
              20.0),
        Param("tx_gain_dbi", {"type": "number"}, "Transmit antenna gain in dBi", 0.0),
        Param("rx_gain_dbi", {"type": "number"}, "Receive antenna gain in dBi", 0.0),
        Param("bandwidth_hz", {"type": "number", "exclusiveMinimum": 0},
              "Channel bandwidth in Hz: the B of Shannon's B*log2(1+SNR)", 20e6),
        Param("noise_figure_db", {"type": "number", "minimum": 0},
              "Receiver noise figure in dB; the noise floor is then "
              "-174 dBm/Hz + 10*log10(bandwidth_hz) + noise_figure_db", 7.0),
        Param("noise_floor_dbm", {"type": "number"},
              "Noise floor in dBm; when given it replaces the floor derived from "
              "bandwidth_hz and noise_figure_db"),
        Param("efficiency", {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
              "Fraction of the Shannon capacity a real PHY/MAC achieves (0..1]", 0.5),
        _rate_param("54Mbit", "Rate cap of each direction (the PHY's highest rate)"),
        Param("snr_threshold_db", {"type": "number"},
              "SNR in dB at which the logistic loss curve gives 50 % loss", 5.0),
        Param("snr_width_db", {"type": "number", "exclusiveMinimum": 0},
              "Width in dB of the logistic loss curve: loss % = "
              "100 / (1 + exp((SNR - snr_threshold_db) / snr_width_db))", 1.0),
        SPEED,
    )
    frequency_hz: float
    eirp_dbm: float
    rx_gain_dbi: float
    bandwidth_hz: float
    noise_floor_dbm: float
    efficiency: float
    max_rate_bps: int
    snr_threshold_db: float
    snr_width_db: float
    speed_m_per_s: float
    params: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FreeSpace:
        v = _with_defaults(cls, params)
        floor = v["noise_floor_dbm"]
        if floor is None:
            floor = (THERMAL_NOISE_DBM_PER_HZ + 10 * math.log10(v["bandwidth_hz"])
                     + v["noise_figure_db"])
        return cls(frequency_hz=float(v["frequency_hz"]),
                   eirp_dbm=float(v["tx_power_dbm"] + v["tx_gain_dbi"]),
                   rx_gain_dbi=float(v["rx_gain_dbi"]), bandwidth_hz=float(v["bandwidth_hz"]),
                   noise_floor_dbm=float(floor), efficiency=float(v["efficiency"]),
                   max_rate_bps=_rate(v["rate"]), snr_threshold_db=float(v["snr_threshold_db"]),
                   snr_width_db=float(v["snr_width_db"]),
                   speed_m_per_s=float(v["speed_m_per_s"]), params=dict(params))

    def snr_db(self, distance_m: float) -> float:
        received = self.eirp_dbm + self.rx_gain_dbi - fspl_db(distance_m, self.frequency_hz)
        return received - self.noise_floor_dbm

    def properties(self, a: Position, b: Position) -> LinkProperties:
        distance = math.dist(a, b)
        snr = self.snr_db(distance)
        shannon = self.bandwidth_hz * math.log2(1 + 10 ** (snr / 10)) * self.efficiency
        rate = min(self.max_rate_bps, max(MIN_RATE_BPS, int(shannon)))
        return LinkProperties(rate_bps=rate,
                              delay_us=seconds_to_us(distance / self.speed_m_per_s),
                              loss_pct=logistic_loss_pct(snr, self.snr_threshold_db,
                                                         self.snr_width_db))


@register
@dataclass(frozen=True)
class Laser(Propagation):
    """A propagation link with a range: beyond ``range_m`` there is no link at all."""

    NAME: ClassVar[str] = "laser"
    SUMMARY: ClassVar[str] = ("Inter-satellite optical link: fixed rate up to range_m, delay "
                              "from distance, no link beyond.")
    PARAMS: ClassVar[tuple[Param, ...]] = (
        _rate_param("10Gbit", "Rate of each direction while in range"),
        Param("range_m", {"type": "number", "exclusiveMinimum": 0},
              "Longest link in metres (5e6: 5,000 km, about the longest chord between two "
              "satellites at 550 km that clears the atmosphere)", 5e6),
        SPEED, JITTER, LOSS,
    )
    range_m: float = 5e6

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Laser:
        model = super().from_params(params)
        return replace(model, range_m=float(_with_defaults(cls, params)["range_m"]))

    def properties(self, a: Position, b: Position) -> LinkProperties | None:
        if math.dist(a, b) > self.range_m:
            return None
        return super().properties(a, b)


def propagation_delay_s(a: Position, b: Position,
                        speed_m_per_s: float = SPEED_OF_LIGHT_M_PER_S) -> float:
    """Seconds a signal needs from a to b (positions in metres)."""
    return math.dist(a, b) / speed_m_per_s


def fspl_db(distance_m: float, frequency_hz: float) -> float:
    """Friis free-space path loss, 20*log10(4*pi*d*f/c), at least 0 dB.

    Below one wavelength / (4*pi) the far-field formula would be a gain; such a
    link is simply as good as the transmitter.
    """
    ratio = 4 * math.pi * distance_m * frequency_hz / SPEED_OF_LIGHT_M_PER_S
    return 20 * math.log10(ratio) if ratio > 1 else 0.0


def logistic_loss_pct(snr_db: float, threshold_db: float, width_db: float) -> float:
    """Packet loss in percent: 50 % at the threshold, towards 0 above and 100 below."""
    x = (snr_db - threshold_db) / width_db
    if x > 700:  # exp overflows beyond ~709; the loss is 0 to double precision anyway
        return 0.0
    return 100.0 / (1.0 + math.exp(x))


def _rate(text: Any) -> int:
    try:
        return parse_rate(text)
    except ValueError as exc:
        raise ModelError(["params", "rate"], str(exc)) from None


def _with_jitter_as_delay(values: Mapping[str, Any]) -> LinkProperties:
    """Rate, jitter and loss from the params; the delay is set to the jitter for now.

    _delayed adds the propagation delay to it: the delay is propagation + jitter,
    so that with netem's uniform jitter no packet arrives faster than light.
    """
    return _properties(dict(values) | {"delay": values["jitter"]},
                       ("rate", "delay", "jitter", "loss"))


def _delayed(base: LinkProperties, seconds: float) -> LinkProperties:
    """``base`` (delay = its jitter) plus a propagation delay of ``seconds``."""
    return LinkProperties(base.rate_bps, seconds_to_us(seconds) + base.delay_us,
                          base.jitter_us, base.loss_pct)


def schema() -> dict[str, Any]:
    """The JSON Schema of a model declaration, for every registered model."""
    names = sorted(REGISTRY)
    rules = [{"if": {"properties": {"model": {"const": name}}},
              "then": {"properties": {"params": {
                  "type": "object", "additionalProperties": False,
                  "properties": {p.name: p.json_schema() for p in REGISTRY[name].PARAMS}}}}}
             for name in names]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "NestedNet link model",
        "description": ("How a link's rate, delay, jitter and loss follow from the positions of "
                        "its two ends. Used as a scenario's 'link_model' and as the file given "
                        "with --link-model. Models: " + "; ".join(
                            f"{n}: {REGISTRY[n].SUMMARY.rstrip('.')}" for n in names) + "."),
        "type": "object",
        "required": ["model"],
        "additionalProperties": False,
        "properties": {
            "$schema": {"type": "string", "description": "Optional, for editors."},
            "description": {"type": "string"},
            "model": {"type": "string", "description": "One of: " + ", ".join(names)},
            "params": {"type": "object", "description": "The model's parameters; each has a "
                                                        "default."},
        },
        "allOf": rules,
    }


def build(doc: Mapping[str, Any]) -> LinkModel:
    """A model from a schema-checked declaration; ModelError for unknown names or values."""
    cls = REGISTRY.get(doc["model"])
    if cls is None:
        raise ModelError(["model"], f"unknown link model {doc['model']!r}: choose one of "
                                    + ", ".join(sorted(REGISTRY)))
    return cls.from_params(doc.get("params", {}))
