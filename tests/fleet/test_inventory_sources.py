"""The inventories admins already have: Ansible YAML, ``ansible-inventory --list`` JSON, ssh_config,
plain lists; checked against the real ``ansible-inventory`` (ansible-core, a dev dependency) on the
same files: the same hosts, groups and variables."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sysmcp.fleet.inventory import Host, Inventory, InventoryError, parse_ini
from sysmcp.fleet.setup import load_inventory, parse_inventory
from sysmcp.fleet.sources import detect, from_json, from_ssh_config, from_yaml, parse_yaml
from sysmcp.fleet.ssh import SshSettings, session_argv

YAML = """\
# a YAML inventory
---
all:
  vars:
    ansible_user: root
  hosts:
    mail.example.com:
  children:
    web:
      hosts:
        web[01:03].example.com:
        web9.example.com:
          ansible_host: 10.0.0.9   # its own address
          ansible_port: 2222
      vars:
        ansible_user: "www"
        ansible_ssh_common_args: '-J bastion.example.com -o ServerAliveInterval=5'
    db:
      hosts:
        db1:
          ansible_user: 'postgres'
          motd: 'pg''s own host'
          sysmcp_command: "uvx sysmcp --root /var/lib/postgresql"
      children:
        db_replicas:
          hosts:
            db2:
            db3: {}
          vars:
            ansible_port: 5022
      vars:
        ansible_port: 22
        backup_paths: [/srv, "/var/backups"]
    edge:
      hosts:
        db2:
      vars:
        ansible_port: 6022
"""

INI = """\
mail.example.com

[web]
web[01:03].example.com
web9.example.com ansible_host=10.0.0.9 ansible_port=2222

[web:vars]
ansible_user=www
ansible_ssh_common_args='-J bastion.example.com -o ServerAliveInterval=5'

[db]
db1 ansible_user=admin

[db_replicas]
db2
db3 ansible_ssh_host=10.1.0.3

[db:children]
db_replicas

[db_replicas:vars]
ansible_port=5022

[db:vars]
ansible_port=22

[zz]
db2

[zz:vars]
ansible_port=7022

[all:vars]
ansible_user=root
"""

#: Anchors, aliases and merge keys, as admins write them to say a thing once (Ansible reads them all).
ANCHORED = """\
all:
  hosts:
    mail:
      motd: its own
  children:
    web:
      hosts:
        web1: &webhost
          ansible_port: 2222
          ansible_user: www
        web2: *webhost
        web3:
          <<: *webhost
          ansible_user: ops
      vars: &common
        ntp_servers: [ntp1, ntp2]
        motd: shared
    db:
      hosts:
        db1:
          <<: [*webhost]
      vars: *common
"""

ANSIBLE = shutil.which(
    "ansible-inventory", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
)


def ansible_list(path: Path, tmp: Path) -> dict[str, Any]:
    if ANSIBLE is None:
        pytest.skip("ansible-inventory is not installed (uv sync installs ansible-core, a dev dependency)")
    env = {**os.environ, "ANSIBLE_HOME": str(tmp), "ANSIBLE_LOCAL_TEMP": str(tmp), "ANSIBLE_NOCOLOR": "1"}
    done = subprocess.run(
        [ANSIBLE, "-i", str(path), "--list"], capture_output=True, text=True, env=env, check=True, timeout=300
    )
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def ansible_members(data: dict[str, Any], group: str) -> set[str]:
    body = data.get(group, {})
    found = set(body.get("hosts", []))
    for child in body.get("children", []):
        found |= ansible_members(data, child)
    return found


def assert_same_as_ansible(ours: Inventory, data: dict[str, Any]) -> None:
    hostvars = data["_meta"]["hostvars"]
    assert set(ours.hosts) == ansible_members(data, "all") == set(hostvars)
    groups = {g for g in data if g != "_meta"}
    assert set(ours.groups) == groups
    for group in groups:
        assert set(ours.groups[group]) == ansible_members(data, group), group
    for name, expected in hostvars.items():
        got = ours.variables[name]
        want = {k: json.dumps(v) if isinstance(v, (list, dict)) else str(v) for k, v in expected.items()}
        assert {k: v for k, v in got.items() if k in want} == want and set(got) == set(want), name


@pytest.fixture(scope="module")
def ansible_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    """``ansible-inventory --list`` once per inventory (each run costs seconds): YAML, INI, and the
    JSON it printed for the YAML read back by ansible itself (a script inventory)."""
    base = tmp_path_factory.mktemp("ansible")
    runs: dict[str, tuple[Path, dict[str, Any]]] = {}
    for name, text in (("hosts.yml", YAML), ("hosts.ini", INI), ("anchored.yml", ANCHORED)):
        path = base / name
        path.write_text(text)
        runs[name] = (path, ansible_list(path, base))
    return runs


@pytest.mark.slow  # the real ansible-inventory, run twice: about a second of CPU each
def test_yaml_is_read_as_ansible_reads_it(ansible_runs: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    path, data = ansible_runs["hosts.yml"]
    ours = parse_inventory(path.read_text(), str(path))
    assert_same_as_ansible(ours, data)
    assert ours.hosts["web9.example.com"] == Host(
        "web9.example.com",
        "10.0.0.9",
        2222,
        "www",
        jump="bastion.example.com",
        options=("ServerAliveInterval=5",),
    )
    assert ours.hosts["db1"].command == "uvx sysmcp --root /var/lib/postgresql"
    assert ours.hosts["db2"].port == 5022  # db_replicas (depth 2) is deeper than edge (1): its vars win
    assert ours.hosts["db3"].port == 5022  # the child's vars win over the parent's


@pytest.mark.slow  # the real ansible-inventory: about a second of CPU
def test_yaml_anchors_aliases_and_merge_keys_are_read_as_ansible_reads_them(
    ansible_runs: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """They were refused ("YAML anchors and aliases (&, *) are not supported"): an inventory that
    ``ansible -m ping`` reads stopped sysmcp at start-up."""
    path, data = ansible_runs["anchored.yml"]
    ours = parse_inventory(path.read_text(), str(path))
    assert_same_as_ansible(ours, data)
    assert ours.hosts["web2"] == Host("web2", port=2222, user="www")
    assert ours.hosts["web3"] == Host("web3", port=2222, user="ops")  # its own key wins over the merged one


def test_a_merged_key_the_mapping_gives_again_is_its_own_wherever_the_alias_to_it_stands() -> None:
    """PyYAML merges a mapping's ``<<`` into it in place, the first time any mapping merging it is
    built: where a shallower mapping merging this one (``stg1: {<<: *web}``) was built first, ``web1``'s
    own ``ansible_port`` then met the merged one and the inventory was refused ("given twice"), though
    ``ansible-inventory`` reads it (web1 on port 2222, stg1 too)."""
    inventory = from_yaml(
        "all:\n"
        "  children:\n"
        "    prod:\n"
        "      children:\n"
        "        web:\n"
        "          hosts:\n"
        "            web1: &web\n"
        "              <<: {ansible_port: 22, ansible_user: ops}\n"
        "              ansible_port: 2222\n"
        "    staging:\n"
        "      hosts:\n"
        "        stg1:\n"
        "          <<: *web\n"
        "          ansible_host: 10.0.0.9\n",
        "hosts.yml",
    )
    assert inventory.hosts["web1"] == Host("web1", port=2222, user="ops")
    assert inventory.hosts["stg1"] == Host("stg1", "10.0.0.9", 2222, "ops")
    with pytest.raises(InventoryError, match=r"hosts\.yml line 4: 'a' is given twice"):
        from_yaml("x: &x\n  <<: {a: 1}\n  a: 2\n  a: 3\ny: {<<: *x}\n", "hosts.yml")


@pytest.mark.parametrize(
    "text",
    [
        # nine levels of nine aliases: 387 million values from a few hundred bytes (billion laughs)
        "all:\n  vars:\n    l0: &l0 [x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9)),
        "all:\n  vars:\n    x: &x [a, *x]\n",  # a list that holds itself
        "all:\n  children:\n    g: &g\n      children:\n        h: *g\n",  # a group inside itself
    ],
)
def test_aliases_that_expand_without_bound_are_refused_with_their_line(text: str) -> None:
    with pytest.raises(InventoryError, match=r"hosts\.yml line \d+: .*(alias|itself)"):
        from_yaml(text, "hosts.yml")


def test_aliases_of_a_long_string_are_bounded_by_its_length_not_counted_as_one_value() -> None:
    """A 100 KB string aliased 10, 100 and 1,000 times is 1,111 values, far within the bound, but each
    list variable is kept as its JSON: 111 MB from a 100 KB file, and two levels more (111,111 values,
    still within it) were 11 GB, read until memory ran out. What aliases expand to is bounded in
    characters as well as in values."""
    text = (
        "all:\n  hosts:\n    h1:\n      s: &s " + "x" * 100_000 + "\n"
        "      l0: &l0 [*s, *s, *s, *s, *s, *s, *s, *s, *s, *s]\n"
        + "".join(f"      l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 5))
    )
    with pytest.raises(InventoryError, match=r"hosts\.yml line \d+: YAML aliases expand .* characters"):
        from_yaml(text, "hosts.yml")
    # the same string given a few times over is an inventory like any other
    few = "all:\n  hosts:\n    h1:\n      s: &s " + "x" * 100_000 + "\n      l: [*s, *s, *s]\n"
    assert len(from_yaml(few, "hosts.yml").variables["h1"]["l"]) > 300_000


@pytest.mark.slow  # the real ansible-inventory, run twice: about a second of CPU each
def test_ini_precedence_and_aliases_as_ansible(ansible_runs: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    path, data = ansible_runs["hosts.ini"]
    ours = parse_ini(path.read_text(), str(path))
    assert_same_as_ansible(ours, data)
    assert ours.hosts["db2"].port == 5022  # db_replicas is deeper than zz: its vars win, whatever the order
    assert ours.hosts["db3"].address == "10.1.0.3" and ours.hosts["db1"].user == "admin"


@pytest.mark.slow  # the real ansible-inventory, run twice: about a second of CPU each
def test_the_json_of_ansible_inventory_list_gives_the_same_fleet(
    ansible_runs: dict[str, tuple[Path, dict[str, Any]]], tmp_path: Path
) -> None:
    for path, data in ansible_runs.values():
        listed = from_json(json.dumps(data), "listed.json")
        assert_same_as_ansible(listed, data)
        assert listed.hosts == parse_inventory(path.read_text(), str(path)).hosts


def test_a_dynamic_inventory_command_from_the_operators_command_line(tmp_path: Path) -> None:
    script = tmp_path / "cloud.py"
    listing = {"_meta": {"hostvars": {"i-1": {"ansible_host": "127.0.0.5"}}}, "tag_web": ["i-1", "i-2"]}
    script.write_text(f"import json\nprint(json.dumps({listing!r}))\n")
    inventory = load_inventory([], None, None, f"{sys.executable} {script}")
    assert list(inventory.hosts) == ["i-1", "i-2"] and inventory.hosts["i-1"].address == "127.0.0.5"
    assert inventory.groups["tag_web"] == ("i-1", "i-2")
    with pytest.raises(OSError, match="exited with status 3: broken"):
        load_inventory(
            [],
            None,
            None,
            f"{sys.executable} -c \"import sys; sys.exit('broken') if 0 else (print('broken', file=sys.stderr), sys.exit(3))\"",
        )


def test_an_ssh_config_inventory_lists_the_hosts_of_the_files_it_includes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Include`` was passed over: a ~/.ssh/config kept in config.d files (as Debian's own is) listed
    none of their hosts, and the model was told they were unknown."""
    monkeypatch.setenv("HOME", str(tmp_path))
    parts = tmp_path / ".ssh" / "config.d"
    parts.mkdir(parents=True)
    (parts / "20-db.conf").write_text("Host db1 db2\n  ProxyJump dbjump\n")
    (parts / "10-web.conf").write_text(
        "Host web1\n  HostName 10.0.0.1\nInclude config.d/nested/*\n"
    )  # ~/.ssh/…
    (parts / "nested").mkdir()
    (parts / "nested" / "x").write_text("Host web2\n")
    (parts / "ignored.txt").write_text("Host nothere\n")
    config = tmp_path / "ssh_config"
    config.write_text(
        "Include config.d/*.conf\n"  # relative: under ~/.ssh, as ssh reads it; sorted
        f"Include {tmp_path}/absent/*\n"  # a glob matching nothing is nothing, as for ssh
        "Host mail\n"
        "  User root\n"
    )
    inventory = parse_inventory(config.read_text(), str(config))
    assert list(inventory.hosts) == ["web1", "web2", "db1", "db2", "mail"]
    assert inventory.hosts["db2"].jump == "dbjump" and inventory.hosts["mail"].jump is None
    (parts / "nested" / "x").write_text(f"Include {parts}/10-web.conf\n")  # includes itself, for ever
    with pytest.raises(InventoryError, match="nested more than 16 deep"):
        parse_inventory(config.read_text(), str(config))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")
def test_an_include_of_a_pipe_or_a_device_is_refused_not_waited_on(tmp_path: Path) -> None:
    """``Include`` of a FIFO waited for a writer for ever at start-up (of ``/dev/zero``, read until memory
    ran out); an ssh_config's included files are regular files, and anything else is refused naming it."""
    os.mkfifo(tmp_path / "fifo")
    for target in (tmp_path / "fifo", Path("/dev/zero")):
        config = tmp_path / "ssh_config"
        config.write_text(f"Host web1\nInclude {target}\n")
        script = (
            "import resource\n"
            "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"  # /dev/zero: not all memory
            "from sysmcp.fleet.inventory import InventoryError\n"
            "from sysmcp.fleet.setup import parse_inventory\n"
            "try:\n"
            f"    parse_inventory(open({str(config)!r}).read(), {str(config)!r})\n"
            "except InventoryError as exc:\n"
            "    print(exc)\n"
        )
        # in a child, bounded: before the fix the first waited for ever and the second ate all memory
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-500:]
        assert f"{target} is not a regular file" in done.stdout


def test_ssh_config_hosts_and_the_proxyjump_ssh_would_use() -> None:
    config = """\
# ~/.ssh/config
Host bastion
  HostName 127.0.0.2
Host web1 web2 db-*
  ProxyJump bastion
Host web2
  ProxyJump other   # not used: ssh takes the first value that applies
Host db1
  User postgres
Host !db1 *
  ProxyJump none
Match host foo
  ProxyJump x
"""
    inventory = from_ssh_config(config)
    assert list(inventory.hosts) == ["bastion", "web1", "web2", "db1"]
    assert [inventory.hosts[n].jump for n in inventory.hosts] == [None, "bastion", "bastion", None]
    assert detect(config) == "ssh_config"
    argv = session_argv(SshSettings(control_dir="/tmp/x"), inventory.hosts["web1"])
    assert "ProxyJump=bastion" in argv and argv.index("ProxyJump=bastion") < argv.index("--")


def test_forms_are_told_apart_and_plain_lists_are_ini() -> None:
    assert detect("web1\nweb2\n") == "ini" and list(parse_inventory("web1\nweb2\n", "list").hosts) == [
        "web1",
        "web2",
    ]
    assert detect(YAML) == "yaml" and detect(INI) == "ini" and detect('{"all": {}}') == "json"
    assert detect("web1:2222\n") == "ini"
    assert detect("x", "hosts.yaml") == "yaml"
    assert detect("# mine\nInclude ~/.ssh/config.d/*\nHost web1\n", "fleet.conf") == "ssh_config"


def test_yaml_values_are_read_as_yaml_defines_them() -> None:
    assert parse_yaml("a:\n  - 1\n  - 'two'\n  - k: v\n    j: w\nb: [x, 'y z']\nc: ~\nd: \"q\\\"x\"\n") == {
        "a": [1, "two", {"k": "v", "j": "w"}],
        "b": ["x", "y z"],
        "c": None,
        "d": 'q"x',
    }
    assert parse_yaml("url: http://x/#frag  # comment\n") == {"url": "http://x/#frag"}


def test_flow_mappings_block_scalars_and_dates_in_an_inventory_are_read() -> None:
    inventory = from_yaml(
        "all:\n"
        "  hosts:\n"
        "    db1: {ansible_port: 2022, ansible_user: pg}\n"
        "    db2:\n"
        "      sysmcp_command: >-\n"
        "        uvx sysmcp\n"
        "        --root /srv\n"
        "  vars:\n"
        "    installed: [2024-05-01]\n"
    )
    assert inventory.hosts["db1"].port == 2022 and inventory.hosts["db1"].user == "pg"
    assert inventory.hosts["db2"].command == "uvx sysmcp --root /srv"
    assert inventory.variables["db1"]["installed"] == '["2024-05-01"]'


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("all:\n  hosts:\n    -web1:\n", "not a host name"),
        ("all:\n  hosts:\n    web1:\n      ansible_host: -oProxyCommand=x\n", "not starting with '-'"),
        (
            "all:\n  hosts:\n    a:\n  vars:\n    ansible_ssh_common_args: -oProxyJump=-x\n",
            "ProxyJump must be one word not starting with '-'",
        ),
        ("all:\n  hosts:\n    a:\n  vars:\n    ansible_ssh_extra_args: --evil\n", "not an ssh option"),
        (
            "all:\n  hosts:\n    a:\n  vars:\n    ansible_ssh_common_args: -o LocalCommand=x\n",
            "not a Key=Value",
        ),
        ("all:\n\thosts:\n", "tabs"),
        ("all:\n  hosts:\n    a:\n   b:\n", "indentation"),
        ("all:\n  bogus: 1\n", "only hosts, vars, children"),
        ("all:\n  hosts: [a]\n", "mapping of host names"),
        ("all:\n  hosts:\n    a:\n    a:\n", "line 4: 'a' is given twice"),
        (
            "all:\n  vars:\n    x: !vault |\n      $ANSIBLE_VAULT\n",
            "line 3: could not determine a constructor",
        ),
        ("all:\n  vars:\n    x: " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
    ],
)
def test_malformed_yaml_inventories_are_refused(text: str, words: str) -> None:
    with pytest.raises(InventoryError, match=words):
        from_yaml(text, "hosts.yml")


def test_json_nested_deeper_than_python_reads_is_refused_as_an_inventory_error() -> None:
    with pytest.raises(InventoryError, match="nested too deeply"):
        from_json('{"all": ' * 100_000 + "{}" + "}" * 100_000, "cloud.json")


def test_json_host_names_beginning_with_a_dash_are_refused() -> None:
    with pytest.raises(InventoryError, match="not a host name"):
        from_json('{"web": ["-oProxyCommand=evil"]}')
    with pytest.raises(InventoryError, match="not starting with '-'"):
        from_json('{"web": ["w1"], "_meta": {"hostvars": {"w1": {"ansible_user": "-l"}}}}')


@pytest.mark.slow  # an inventory of 5,000 hosts
def test_five_thousand_hosts_and_patterns_matching_none_or_all() -> None:
    text = "all:\n  children:\n" + "".join(
        f"    rack{r:02}:\n      hosts:\n" + "".join(f"        n{r:02}-{i:03}:\n" for i in range(100))
        for r in range(50)
    )
    inventory = from_yaml(text)
    assert len(inventory.hosts) == 5000 and len(inventory.group_names) == 50
    assert len(inventory.resolve(["all"])) == 5000 and len(inventory.resolve(["n*"])) == 5000
    assert inventory.resolve(["rack07"])[0] == "n07-000"
    with pytest.raises(ValueError, match="'nothing\\*'"):
        inventory.resolve(["nothing*"])
