"""Fleet policies by name: the one registry ``fleet-sim``, the pipeline YAML and both live
providers (local, SkyPilot) resolve a policy through.

In the spirit of SkyPilot's recovery-strategy registry (a strategy class registers under
a name; a task names the strategy it wants), every online fleet policy registers a
factory under a short name. A pipeline stage names its policy (``policy: spotfleet``);
``fleet-sim --policies failover,spotfleet`` names the ones it evaluates; the providers
build the same class through :func:`get_policy` and drive it with
:class:`fleet.providers.decisions.PolicyDriver`, so what the simulator measures is what
runs.

Registering a new policy::

    from fleet.policies.registry import register_policy

    @register_policy("my_policy")
    class MyPolicy(Policy): ...

or add it to ``fleet.policies.baselines.builtin_policy_factories`` (table order =
``fleet-sim`` table order).
"""

from __future__ import annotations

from collections.abc import Callable

from fleet.policies.base import Policy

#: The project's own policy: what a stage runs when its YAML names none.
DEFAULT_POLICY = "spotfleet"

PolicyFactory = Callable[[], Policy]

_registry: dict[str, PolicyFactory] = {}
_loaded = False


def _builtins() -> dict[str, PolicyFactory]:
    from fleet.policies.baselines import builtin_policy_factories

    return builtin_policy_factories()


def _ensure_loaded() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for name, factory in _builtins().items():
            _registry.setdefault(name, factory)


def register_policy(name: str) -> Callable[[PolicyFactory], PolicyFactory]:
    """Decorator: register a policy class (or zero-argument factory) under ``name``."""
    if not name or not name.replace("_", "").isalnum() or name != name.lower():
        raise ValueError(f"policy name {name!r} must be lower-case letters, digits and underscores")

    def deco(factory: PolicyFactory) -> PolicyFactory:
        _ensure_loaded()
        if name in _registry and _registry[name] is not factory:
            raise ValueError(f"a fleet policy named {name!r} is already registered")
        _registry[name] = factory
        return factory

    return deco


def policy_names() -> list[str]:
    """Every registered policy name, in registration (table) order."""
    _ensure_loaded()
    return list(_registry)


def policy_factories() -> dict[str, PolicyFactory]:
    """Name -> factory of every registered policy (a copy), in table order."""
    _ensure_loaded()
    return dict(_registry)


def check_policy_name(name: str, where: str = "policy") -> str:
    """``name`` if registered, else a ValueError naming ``where`` and the valid names."""
    _ensure_loaded()
    if name not in _registry:
        raise ValueError(f"{where}: unknown fleet policy {name!r}; choose one of "
                         f"{', '.join(_registry)} (fleet/policies/registry.py)")
    return name


def get_policy(name: str | None = None) -> Policy:
    """A fresh instance of the policy registered under ``name`` (default: DEFAULT_POLICY)."""
    name = DEFAULT_POLICY if name is None else name
    check_policy_name(name)
    policy = _registry[name]()
    if not isinstance(policy, Policy):
        raise TypeError(f"fleet policy factory {name!r} returned {type(policy).__name__}, "
                        "not a fleet.policies.base.Policy")
    policy.registry_name = name  # the name it was built under (e.g. uniform_progress_multi)
    return policy


def policy_class(name: str) -> type[Policy]:
    """The class a registered name builds (what tests compare across sim and live)."""
    return type(get_policy(name))
