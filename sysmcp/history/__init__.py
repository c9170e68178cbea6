"""What sysmcp remembers between runs: scans, disk readings and integrity baselines in SQLite.

``store`` keeps them (WAL, migrations, retention, 0600 files), ``snapshots`` says what a scan leaves
behind, ``recording`` turns a scan, a manifest or a statvfs into those records, ``diff`` compares two
snapshots without I/O, ``compare`` is what_changed's engine (choose or make the snapshots, diff them,
fit the fill rate), ``state`` holds the process's one store, ``statedir`` checks the state directory
as ssh checks ~/.ssh. This package may import ``sysmcp.engine``, ``sysmcp.platform`` and
``sysmcp.logconfig`` (docs/ARCHITECTURE.md's import table); ``sysmcp.engine`` never imports it.
"""
