"""Calibration of token estimates from the usage a provider reports."""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..errors import ConfigError
from ..jsontypes import JSONObject


class Calibration:
    """Scale factors learned from provider-reported usage: ``actual ~= messages * scale +
    fixed * fixed_scale``.

    Two parts of a request are counted apart, because an estimate errs differently on each:
    the fixed prefix (the leading system messages and the tool schemas, the same on every
    call: prose and JSON schemas) and the messages after it (tool outputs, code, logs).
    :meth:`observe` takes the *uncalibrated* estimates of both and the prompt tokens the
    provider reported for the whole request:

    * two calls with the same fixed prefix and messages of different sizes give the messages'
      ratio (the difference of the counts over the difference of the estimates), and the rest
      of the count is the fixed prefix's;
    * otherwise the count's error is shared by the two parts by their share of the request
      (the count less the prefix at its scale reads the messages' ratio, the count less the
      messages the prefix's); the first call of all sets both scales to the request's overall
      ratio.

    Each scale moves towards its reading by an exponential moving average; impossible readings
    are ignored and both scales stay within [0.5, 2.0]. With ``fixed=0`` it is one scale for
    the whole request, as before.
    """

    ALPHA = 0.3
    MIN_RATIO, MAX_RATIO = 0.25, 4.0
    MIN_SCALE, MAX_SCALE = 0.5, 2.0
    #: messages must differ by this many tokens (and 5%) between two calls to be compared
    MIN_DELTA = 256

    def __init__(
        self,
        scale: float = 1.0,
        *,
        observations: int = 0,
        fixed_scale: float | None = None,
        last: tuple[int, int, int] | None = None,
    ) -> None:
        self.scale = self._bounded(scale, "calibration scale")
        self.fixed_scale = (
            self.scale
            if fixed_scale is None
            else self._bounded(fixed_scale, "calibration fixed_scale")
        )
        self.observations = observations
        #: the previous reading: (fixed prefix, messages, provider's count)
        self.last = last

    @classmethod
    def _bounded(cls, value: float, what: str) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ConfigError(f"{what} must be a finite number, not {value!r}")
        return min(cls.MAX_SCALE, max(cls.MIN_SCALE, float(value)))

    def _move(self, current: float, ratio: float, weight: float = 1.0) -> float:
        alpha = self.ALPHA * weight
        updated = (1.0 - alpha) * current + alpha * ratio
        return min(self.MAX_SCALE, max(self.MIN_SCALE, updated))

    def observe(self, estimated: int, actual: int, *, fixed: int = 0) -> float:
        """Learn from one call: ``estimated`` uncalibrated tokens of the messages after the
        fixed prefix, ``fixed`` those of the fixed prefix, ``actual`` the provider's count of
        the whole request. Returns the messages' scale."""
        numbers = (estimated, actual, fixed)
        if any(isinstance(n, bool) or not isinstance(n, int | float) for n in numbers):
            return self.scale
        if not estimated > 0 or not actual > 0 or fixed < 0:
            return self.scale
        if not self.MIN_RATIO <= actual / (estimated + fixed) <= self.MAX_RATIO:
            return self.scale
        if fixed <= 0:
            self.scale = self._move(self.scale, actual / estimated)
        elif self.observations == 0:
            ratio = actual / (estimated + fixed)
            self.scale = self._move(self.scale, ratio)
            self.fixed_scale = self._move(self.fixed_scale, ratio)
        else:
            self._observe_parts(int(estimated), int(actual), int(fixed))
        self.last = (int(fixed), int(estimated), int(actual)) if fixed > 0 else None
        self.observations += 1
        return self.scale

    def _observe_parts(self, estimated: int, actual: int, fixed: int) -> None:
        last = self.last
        paired = (
            last is not None
            and abs(last[0] - fixed) <= max(8, fixed // 100)
            and abs(last[1] - estimated) >= max(self.MIN_DELTA, max(last[1], estimated) // 20)
        )
        if paired and last is not None:
            ratio = (actual - last[2]) / (estimated - last[1])
            if self.MIN_RATIO <= ratio <= self.MAX_RATIO:
                self.scale = self._move(self.scale, ratio)
            rest = (actual - self.scale * estimated) / fixed
            if self.MIN_RATIO <= rest <= self.MAX_RATIO:
                self.fixed_scale = self._move(self.fixed_scale, rest)
            return
        # one count for two unknowns: its error is shared by the two parts by their size, so
        # a few small messages after a large prefix do not take the prefix's error for theirs
        messages = (actual - self.fixed_scale * fixed) / estimated
        prefix = (actual - self.scale * estimated) / fixed
        share = estimated / (estimated + fixed)
        if self.MIN_RATIO <= messages <= self.MAX_RATIO:
            self.scale = self._move(self.scale, messages, share)
        if self.MIN_RATIO <= prefix <= self.MAX_RATIO:
            self.fixed_scale = self._move(self.fixed_scale, prefix, 1.0 - share)

    def apply(self, estimated: int) -> int:
        """Calibrated tokens of messages after the fixed prefix."""
        return max(0, round(estimated * self.scale))

    def apply_fixed(self, estimated: int) -> int:
        """Calibrated tokens of the fixed prefix (leading system messages, tool schemas)."""
        return max(0, round(estimated * self.fixed_scale))

    def to_dict(self) -> JSONObject:
        out: JSONObject = {
            "scale": self.scale,
            "fixed_scale": self.fixed_scale,
            "observations": self.observations,
        }
        if self.last is not None:
            out["last"] = list(self.last)
        return out

    @classmethod
    def from_dict(cls, data: object) -> Calibration:
        if not isinstance(data, Mapping):
            raise ConfigError(f"calibration must be an object, not {type(data).__name__}")
        scale = data.get("scale", 1.0)
        observations = data.get("observations", 0)
        if isinstance(scale, bool) or not isinstance(scale, int | float):
            raise ConfigError(f"calibration scale must be a number, not {scale!r}")
        fixed_scale = data.get("fixed_scale", scale)
        if isinstance(fixed_scale, bool) or not isinstance(fixed_scale, int | float):
            raise ConfigError(f"calibration fixed_scale must be a number, not {fixed_scale!r}")
        if isinstance(observations, bool) or not isinstance(observations, int) or observations < 0:
            raise ConfigError(f"calibration observations must be a count, not {observations!r}")
        raw_last = data.get("last")
        last = None
        if raw_last is not None:
            if (
                not isinstance(raw_last, list | tuple)
                or len(raw_last) != 3
                or not all(
                    isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in raw_last
                )
            ):
                raise ConfigError(f"calibration last must be three counts, not {raw_last!r}")
            last = (int(raw_last[0]), int(raw_last[1]), int(raw_last[2]))
        return cls(
            float(scale), observations=observations, fixed_scale=float(fixed_scale), last=last
        )

    def __repr__(self) -> str:
        return (
            f"Calibration(scale={self.scale:.4f}, fixed_scale={self.fixed_scale:.4f}, "
            f"observations={self.observations})"
        )


__all__ = ["Calibration"]
