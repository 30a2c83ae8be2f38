"""The configurations a scenario compares: a name, a retry policy, governor settings."""

from __future__ import annotations

import dataclasses

from retrysafe.governor import GovernorSettings
from retrysafe.policy import RetryPolicy

__all__ = ["YOURS", "Config", "load_protection_configs"]

#: The name of the configuration built from the user's ``--policy`` / ``--governor``.
YOURS = "yours"


@dataclasses.dataclass(frozen=True)
class Config:
    """One way of calling the dependency: ``policy`` with a governor of ``governor`` settings."""

    name: str
    policy: RetryPolicy
    governor: GovernorSettings


def load_protection_configs(
    policy: RetryPolicy | None = None, governor: GovernorSettings | None = None
) -> tuple[Config, ...]:
    """What ``brownout`` and ``outage`` compare, all with the default ``RetryPolicy()``:

    - ``plain retrier``: the governor off, a 4-attempt retry loop and nothing else;
    - ``budget only``: the default retry budget, no breaker;
    - ``defaults``: ``GovernorSettings()``, budget + breaker (what ``Client()`` uses);
    - ``yours``: the policy and governor settings given, when either is (what is not
      given stays the default).
    """
    default = RetryPolicy()
    configs = [
        Config("plain retrier", default, GovernorSettings.off()),
        Config("budget only", default, GovernorSettings(breaker=None)),
        Config("defaults", default, GovernorSettings()),
    ]
    if policy is not None or governor is not None:
        configs.append(
            Config(
                YOURS,
                policy if policy is not None else default,
                governor if governor is not None else GovernorSettings(),
            )
        )
    return tuple(configs)
