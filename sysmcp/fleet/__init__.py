"""The fleet: one sysmcp answering for many hosts over the operator's OpenSSH. Never imported by tools/ or protocol/."""
