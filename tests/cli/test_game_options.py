"""The game options come from the registry; a shared option's help gives each domain's own wording."""
from __future__ import annotations

from sepo.cli.game_options import _help, _registered_params
from sepo.games import domain_names, get_domain


def test_a_shared_option_lists_every_domain_with_its_own_default():
    owners = _registered_params()["rounds"]
    text = _help(owners)
    for domain, param in owners:
        assert f"{domain}: " in text and f"default {param.default}" in text
    assert len(owners) >= 2 and text.count(" | ") == len({(p.help, p.default) for _, p in owners}) - 1


def test_every_domain_parameter_has_an_option():
    registered = _registered_params()
    for name in domain_names():
        for param in get_domain(name).params:
            assert (name, param) in registered[param.name]
