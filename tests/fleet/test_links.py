"""Gateway links to a host's stored results: rewriting, parsing, and each host's form of an argument."""

from __future__ import annotations

from sysmcp.fleet.links import for_host, from_gateway, linked_arguments, to_gateway


def test_a_hosts_links_are_rewritten_everywhere_in_its_result() -> None:
    result = {
        "manifest_uri": "sysmcp://results/3/SHA256SUMS",
        "lines": ["Full manifest: sysmcp://results/3/SHA256SUMS (resources/read)."],
        "count": 3,
        "other": "https://example.org/results/3",
    }
    rewritten = to_gateway("web 1", result)
    assert rewritten["manifest_uri"] == "sysmcp://hosts/web%201/results/3/SHA256SUMS"
    assert rewritten["lines"] == [
        "Full manifest: sysmcp://hosts/web%201/results/3/SHA256SUMS (resources/read)."
    ]
    assert rewritten["count"] == 3 and rewritten["other"] == result["other"]
    assert from_gateway(rewritten["manifest_uri"]) == ("web 1", "sysmcp://results/3/SHA256SUMS")


def test_only_result_links_of_a_named_host_parse() -> None:
    assert from_gateway("sysmcp://results/3/x") is None
    assert from_gateway("sysmcp://hosts//results/3/x") is None
    assert from_gateway("sysmcp://hosts/web1") is None
    assert from_gateway("sysmcp://hosts/web1/etc/passwd") is None
    assert from_gateway("ui://sysmcp/dir-usage") is None


def test_the_origin_gets_its_own_uri_and_the_others_the_text() -> None:
    arguments = {"manifest": " sysmcp://hosts/web1/results/2/SHA256SUMS\n", "base_dir": "/srv"}
    linked = linked_arguments(arguments)
    assert linked == {"manifest": ("web1", "sysmcp://results/2/SHA256SUMS")}
    texts = {"manifest": "abc  ./f\n"}
    assert for_host(arguments, "web1", linked, texts) == {
        "manifest": "sysmcp://results/2/SHA256SUMS",
        "base_dir": "/srv",
    }
    assert for_host(arguments, "web2", linked, texts) == {"manifest": "abc  ./f\n", "base_dir": "/srv"}
    assert linked_arguments({"path": "/srv", "top_n": 3}) == {}


def test_a_link_to_another_host_in_a_hosts_answer_reads_nothing_through_the_gateway() -> None:
    """web02 (compromised) shows web01's stored result as its own: the gateway must not follow it there."""
    rewritten = to_gateway(
        "web02", {"lines": ["Full listing: sysmcp://hosts/web01/results/4/dir_usage.json"]}
    )
    link = rewritten["lines"][0].split(": ", 1)[1]
    assert link == "sysmcp://hosts/web02/hosts/web01/results/4/dir_usage.json"
    assert from_gateway(link) is None


def test_a_link_in_a_key_of_a_hosts_result_is_rewritten_too() -> None:
    """A host's result keyed by a link (``{"sysmcp://results/1/x": …}``): left as it came, it named the
    gateway's own store, whose results are not that host's."""
    rewritten = to_gateway("web02", {"sysmcp://results/1/x": {"sysmcp://hosts/web01/results/2/y": 1}})
    assert rewritten == {
        "sysmcp://hosts/web02/results/1/x": {"sysmcp://hosts/web02/hosts/web01/results/2/y": 1}
    }


def test_a_hosts_file_name_under_o_dir_fits_a_file_system_whatever_its_name_and_links() -> None:
    """The extension comes from the host's own link: one of 1,000 characters made a name past the
    file system's 255 bytes, and ``-o DIR`` stopped at that host and every host after it."""
    from sysmcp.fleet.per_host import file_name, host_links

    host = "w" * 255
    link = f"sysmcp://hosts/{host}/results/1/x." + "e" * 1_000
    assert len(file_name(host, link).encode()) <= 255 and len(file_name(host, None).encode()) <= 255
    many = " ".join(f"sysmcp://hosts/web1/results/{i}/x.txt" for i in range(1_000))
    assert len(host_links("web1", {"text": many})) == 16  # per_host.MAX_LINKS


def test_two_hosts_alike_in_their_first_200_characters_keep_files_that_say_whose_each_is() -> None:
    """A name cut to fit ends in its host's digest: before, both were cut to the same 200 characters,
    and which of ``<name>.json`` and ``<name>-2.json`` held which host depended on who answered first."""
    from sysmcp.fleet.per_host import file_name

    common = "node-" + "x" * 240
    first, second = file_name(f"{common}.a", None), file_name(f"{common}.b", None)
    assert first != second and first == file_name(f"{common}.a", None)
    assert all(len(name.encode()) <= 255 and name.startswith("node-xxx") for name in (first, second))
    assert file_name("web01.example.com", None) == "web01.example.com.json"  # a usual name is as it was
