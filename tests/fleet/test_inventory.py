"""The inventory parser: Ansible INI forms, their errors (with line numbers), and name resolution."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest

from sysmcp.fleet.inventory import (
    Host,
    InventoryError,
    UnknownHosts,
    expand,
    from_names,
    merge,
    parse_ini,
    split_hosts_env,
)
from sysmcp.fleet.sources import from_json

EXAMPLE = """\
# the fleet
bastion.example.com ansible_user=ops

[web]
web1 ansible_host=10.0.0.11
web2 ansible_host=10.0.0.12 ansible_port=2222   # a comment after the variables
web3:2200 sysmcp_command="uvx sysmcp --root /srv"

[db]
; another comment style
db1 ansible_host=10.0.1.1 ansible_user=postgres

[prod:children]
web
db

[db:vars]
ansible_user=dba
ansible_port=2022
"""


def test_host_lines_groups_children_and_variables() -> None:
    inventory = parse_ini(EXAMPLE)
    assert list(inventory.hosts) == ["bastion.example.com", "web1", "web2", "web3", "db1"]
    assert inventory.hosts["web1"] == Host("web1", address="10.0.0.11")
    assert inventory.hosts["web2"].port == 2222
    assert inventory.hosts["web3"] == Host("web3", port=2200, command="uvx sysmcp --root /srv")
    # the host's own line beats its group's [db:vars]; the group's fill in the rest
    assert inventory.hosts["db1"] == Host("db1", address="10.0.1.1", port=2022, user="postgres")
    assert inventory.hosts["bastion.example.com"].user == "ops"
    assert inventory.groups["prod"] == ("web1", "web2", "web3", "db1")
    assert inventory.groups["ungrouped"] == ("bastion.example.com",)
    assert inventory.groups["all"] == tuple(inventory.hosts)
    assert inventory.group_names == ["web", "db", "prod"]


def test_all_vars_apply_to_every_host() -> None:
    inventory = parse_ini("a\n[g]\nb\n[all:vars]\nansible_user=root\n")
    assert {h.user for h in inventory.hosts.values()} == {"root"}


def test_ranges_expand_with_leading_zeros_letters_and_steps() -> None:
    assert expand("web[01:03]") == ["web01", "web02", "web03"]
    assert expand("db-[a:c].example") == ["db-a.example", "db-b.example", "db-c.example"]
    assert expand("n[1:9:4]") == ["n1", "n5", "n9"]
    assert expand("r[1:2]c[1:2]") == ["r1c1", "r1c2", "r2c1", "r2c2"]
    inventory = parse_ini("[web]\nweb[01:20] ansible_user=www\n")
    assert len(inventory.groups["web"]) == 20 and inventory.hosts["web20"].user == "www"


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("[web\nweb1\n", 1, "must end with ']'"),
        ("[web:hosts]\n", 1, "unknown section kind"),
        ("ok\nweb1 ansible_port=http\n", 2, "ansible_port must be a port number"),
        ("web1 ansible_port=70000\n", 1, "port number"),
        ("[g]\nweb1 novalue\n", 2, "expected key=value"),
        ("[g:children]\nmissing\n", 2, "not defined anywhere"),
        ("[a:children]\nb\n[b:children]\na\n", 1, "contain each other"),
        ("\n\nweb[05:01]\n", 3, "runs backwards"),
        ("web[1:x]\n", 1, "two numbers or two letters"),
        ("web[1:100000]\n", 1, "expands to over"),
        ("-oProxyCommand\n", 1, "not a host name"),
        ("web1 ansible_host=-oProxyCommand=evil\n", 1, "not starting with '-'"),
        ("web1 ansible_user='two words'\n", 1, "one word"),
        ('web1 sysmcp_command="unclosed\n', 1, "cannot split"),
        ("[g:vars]\njunk\n", 2, "expected key=value"),
        ("web1 sysmcp_command=''\n", 1, "sysmcp_command is empty"),
        # ssh writes them into a ProxyCommand (%h, %r), which a shell runs
        ("web1 ansible_host=\"x'$(touch${IFS}/tmp/p)'\"\n", 1, "without shell characters"),
        ("[g]\nweb1\n[g:vars]\nansible_user=ops;id\n", 4, "without shell characters"),
        ("web1 ansible_ssh_host=`id`.example.com\n", 1, "without shell characters"),
        ("web1 ansible_user='CORP\\'\n", 1, "without shell characters"),  # would escape what follows %r
        # the same address, user or jump given through the inventory's ssh args, one variable away
        ("web1 ansible_ssh_common_args='-o HostName=a$(id>/tmp/x)'\n", 1, "HostName must be one word"),
        ("web1 ansible_ssh_extra_args='-o User=ops;id'\n", 1, "User must be one word"),
        ("web1 ansible_ssh_common_args='-o user=`id`'\n", 1, "without shell characters"),
        ("web1 ansible_ssh_common_args='-l \"ops;id\"'\n", 1, "-l must be one word"),
        ("web1 ansible_ssh_extra_args=-lops|id\n", 1, "without shell characters"),
        ("web1 ansible_ssh_common_args='-J \"b$(id)\"'\n", 1, "without shell characters"),
        ("web1 ansible_ssh_common_args='-o ProxyJump=b&id'\n", 1, "without shell characters"),
        # a later hop ssh hands to another ssh as its -J value
        ("web1 ansible_ssh_common_args='-J b,-oProxyCommand=/tmp/x'\n", 1, "-J must be one word"),
        ("web1 ansible_ssh_common_args='-o ProxyJump=b:22,-oProxyCommand=/tmp/x'\n", 1, "nor after a comma"),
        ("web1 ansible_port=²\n", 1, "port number"),  # a digit to str.isdigit, none to int
        ("web[¹:³]\n", 1, "two numbers or two letters"),
        # past 4,300 digits int() refuses with a ValueError of its own
        ("web1 ansible_port=" + "1" * 5000 + "\n", 1, "port number"),
        ("web[1:" + "9" * 5000 + "]\n", 1, "two numbers or two letters"),
        ("web[1:9:" + "1" * 5000 + "]\n", 1, "step must be a positive integer"),
    ],
)
def test_malformed_inventories_name_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(InventoryError) as caught:
        parse_ini(text, source="hosts.ini")
    assert caught.value.line == line
    assert words in str(caught.value)
    assert str(caught.value).startswith(f"hosts.ini line {line}:")


def test_a_typo_of_a_range_is_refused_before_its_names_are_made() -> None:
    """web[1:2000000] is counted, not spelled out two million times and then refused."""
    tracemalloc.start()
    try:
        with pytest.raises(InventoryError, match="expands to over 10,000 hosts"):
            parse_ini("web[1:2000000]\n")
        with pytest.raises(InventoryError, match="expands to over"):
            parse_ini("web[1:99999999999999999999999]\n")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_addresses_and_users_of_every_kind_ssh_takes_are_kept() -> None:
    inventory = parse_ini(
        "v6 ansible_host=fe80::1%eth0 ansible_user=ops.admin@corp.example\n"
        "v4 ansible_host=10.0.0.1 ansible_user=svc_backup-2\n"
        "idn ansible_host=bücher.example\n"
        "winbind ansible_user='CORP\\alice'\n"  # in a shell a backslash only escapes the next character
    )
    assert [(h.address, h.user) for h in inventory.hosts.values()] == [
        ("fe80::1%eth0", "ops.admin@corp.example"),
        ("10.0.0.1", "svc_backup-2"),
        ("bücher.example", None),
        (None, "CORP\\alice"),
    ]


def test_twenty_thousand_hosts_in_two_thousand_groups_are_built_in_seconds_not_minutes() -> None:
    """Each host's groups and each group's order are looked up, never scanned for (a rack per group,
    as cloud and HPC inventories have them)."""
    racks = "".join(f"[rack{r:04}]\nn{r:04}-[0:9]\n" for r in range(2000))
    started = time.monotonic()
    inventory = merge(parse_ini(racks + "[rack0007:vars]\nansible_user=ops\n"), from_names(["extra"]))
    elapsed = time.monotonic() - started
    assert len(inventory.hosts) == 20_001 and len(inventory.group_names) == 2000
    assert inventory.groups["rack1999"] == tuple(f"n1999-{i}" for i in range(10))
    assert inventory.hosts["n0007-9"].user == "ops" and inventory.hosts["n0008-0"].user is None
    assert elapsed < 30  # a guard far above a loaded machine's time for it: the scans took minutes


def test_names_from_the_command_line_and_the_environment() -> None:
    assert split_hosts_env("web1,web2:db1, db2") == ["web1", "web2", "db1", "db2"]
    inventory = from_names(["web1", "web2", "web1"])
    assert list(inventory.hosts) == ["web1", "web2"] and inventory.groups["all"] == ("web1", "web2")
    with pytest.raises(InventoryError, match="not a host name"):
        from_names(["-F/etc/passwd"])
    both = merge(parse_ini("[web]\nweb1 ansible_port=22\n"), from_names(["web1", "extra"]))
    assert list(both.hosts) == ["web1", "extra"] and both.hosts["web1"].port == 22
    assert both.groups["web"] == ("web1",)


def test_resolve_takes_hosts_groups_globs_and_all_in_inventory_order() -> None:
    inventory = parse_ini(EXAMPLE)
    assert inventory.resolve(["db1", "web1"]) == ["web1", "db1"]
    assert inventory.resolve(["prod"]) == ["web1", "web2", "web3", "db1"]
    assert inventory.resolve(["web[12]", "db*"]) == ["web1", "web2", "db1"]
    assert inventory.resolve(["all"]) == list(inventory.hosts)


def test_unknown_names_refuse_the_call_listing_the_groups() -> None:
    inventory = parse_ini(EXAMPLE)
    with pytest.raises(UnknownHosts) as caught:
        inventory.resolve(["web1", "evil.example.org", "mail*"])
    text = str(caught.value)
    assert "'evil.example.org'" in text and "'mail*'" in text and "'web1'" not in text
    assert "groups: web, db, prod" in text and "5 hosts" in text


def test_groups_without_hosts_refuse_the_call_only_when_nothing_at_all_is_chosen() -> None:
    inventory = parse_ini("web1\n[empty]\n[web]\nweb1\n")
    with pytest.raises(
        UnknownHosts, match=r"^no host in group 'empty'\. The inventory has 1 host; groups: web "
    ):
        inventory.resolve(["empty"])  # "0 of 0 hosts answered" would say nothing
    with pytest.raises(UnknownHosts, match=r"^no host in group 'empty', 'ungrouped'\. "):
        inventory.resolve(["empty", "ungrouped"])
    with pytest.raises(UnknownHosts) as caught:
        inventory.resolve(["web", "empty", "mail1"])
    assert str(caught.value).startswith(
        "unknown host or group: 'mail1'. The inventory has 1 host; groups: web "
    )
    # web1 is in web, so ungrouped is empty: naming it, or another empty group, beside web runs on web
    assert inventory.resolve(["web", "empty", "ungrouped"]) == ["web1"]
    assert parse_ini("[web]\nweb1\n[db]\n").resolve(["web", "db"]) == ["web1"]


@pytest.mark.parametrize("form", ["ini", "json"])
def test_a_chain_of_thousands_of_child_groups_is_built_not_a_recursion_error(form: str) -> None:
    """Groups and their depths are walked with a stack of their own; a cycle deep in the chain is still
    refused with its line."""
    count = 3000
    if form == "ini":
        text = "".join(f"[g{i}:children]\ng{i + 1}\n" for i in range(count)) + f"[g{count}]\nweb1\n"
        inventory = parse_ini(text)
        with pytest.raises(InventoryError, match=r"line 1: groups contain each other: g0 → g1 → .* → g0$"):
            parse_ini(text + f"[g{count}:children]\ng0\n")
    else:
        groups = {f"g{i}": {"children": [f"g{i + 1}"]} for i in range(count)}
        inventory = from_json(json.dumps({**groups, f"g{count}": {"hosts": ["web1"]}}))
    assert inventory.resolve(["g0"]) == ["web1"]
    assert len(inventory.groups) == count + 3  # every g, all and ungrouped


def test_a_host_name_longer_than_any_dns_name_is_refused_with_its_start_quoted() -> None:
    """Every name is in the instructions (the first 50), ssh's argv and a file name under -o DIR: a
    name of 100,000 characters made 5 MB of instructions and an ssh that could not start."""
    assert list(parse_ini("w" * 255 + "\n").hosts) == ["w" * 255]
    with pytest.raises(InventoryError) as caught:
        parse_ini("web1\n" + "w" * 100_000 + " ansible_port=22\n")
    said = str(caught.value)
    assert said.startswith("inventory line 2: 'wwww") and len(said) < 200
    assert said.endswith("… (100,000 characters) is not a host name: longer than 255 characters")
    with pytest.raises(InventoryError, match="longer than 255 characters"):
        from_names(["x" * 256])


def test_an_error_for_unknown_names_quotes_a_few_of_them_each_cut_short() -> None:
    """The model's own list (a thousand names, each of 10,000 characters) was echoed back whole."""
    inventory = parse_ini("[web]\nweb1\n")
    with pytest.raises(UnknownHosts) as caught:
        inventory.resolve(["web1", *(f"{i}" + "z" * 10_000 for i in range(1_000))])
    said = str(caught.value)
    assert said.startswith("unknown host or group: '0zzzz") and len(said) < 2_000, len(said)
    assert "… (10,001 characters), '1zzz" in said and "… and 990 more. The inventory has 1 host" in said


def test_a_name_given_many_times_is_resolved_once_and_too_many_globs_refuse_the_call() -> None:
    """Each glob is matched against every host on the event loop every session shares: "all" 20,000
    times took it for 6 s over 10,000 hosts, 300 globs 2.5 s."""
    inventory = parse_ini("[web]\nweb[00001:10000]\n")
    started = time.process_time()
    assert len(inventory.resolve(["all"] * 20_000 + ["web0000*"] * 20_000)) == 10_000
    assert time.process_time() - started < 1.0
    assert inventory.resolve(["web0000[12]", "web0001?"]) == [f"web{i:05}" for i in (1, 2, *range(10, 20))]
    with pytest.raises(UnknownHosts):
        inventory.resolve(["WEB0000*"])  # case counts, as fnmatchcase has it
    with pytest.raises(UnknownHosts) as caught:
        inventory.resolve([f"web{i:05}*" for i in range(101)])
    assert str(caught.value).startswith("101 globs in one call, more than the 100 it may give: name a group")


def test_an_ssh_connection_named_in_any_of_ansibles_spellings_is_ssh() -> None:
    """``ansible.legacy.ssh`` is Ansible's ssh plugin as surely as ``ansible.builtin.ssh`` (the legacy
    namespace holds the built-in plugins): such a host was refused as "not ssh"."""
    inventory = parse_ini(
        "a ansible_connection=ansible.legacy.ssh\n"
        "b ansible_connection=ansible.builtin.paramiko_ssh\n"
        "c ansible_connection=smart\n"
        "d ansible_connection=ansible.legacy.local\n"
    )
    assert [inventory.hosts[n].connection for n in "abcd"] == [None, None, None, "local"]
