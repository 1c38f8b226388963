"""Write the lab's copy of cluster/config.yaml: only the addresses, the SSH user and the key differ.

    python cluster/lab_config.py cluster/config.yaml OUT.yaml --head 10.77.0.10 \\
        --workers 10.77.0.11,10.77.0.12,10.77.0.13 --user hsdaglab --key KEY

The lines of the file are kept as they are but for ``head_ip``, the
``worker_ips`` entries, ``ssh_user`` and ``ssh_private_key`` (uncommented),
and the copy is read back and compared with the original: anything else that
differs, or an address outside the lab's subnet, is refused, so the lab runs
the file a user edits.
"""
from __future__ import annotations

import argparse
import ipaddress
import re
import sys

import yaml


def rewrite(text: str, head: str, workers: list[str], user: str, key: str) -> str:
    out, in_workers, left = [], False, list(workers)
    for line in text.splitlines():
        indent = line[: len(line) - len(line.lstrip())]
        body = line.strip()
        if in_workers and body.startswith("- "):
            if left:  # one lab address per worker address of the file
                out.append(f"{indent}- {left.pop(0)}")
            continue
        if in_workers:
            out.extend(f"{pad}- {w}" for w in left)
            in_workers = False
        if re.match(r"head_ip\s*:", body):
            out.append(f"{indent}head_ip: {head}")
        elif re.match(r"worker_ips\s*:", body):
            out.append(f"{indent}worker_ips:")
            in_workers, pad = True, indent + "  "
        elif re.match(r"ssh_user\s*:", body):
            out.append(f"{indent}ssh_user: {user}")
        elif re.match(r"#?\s*ssh_private_key\s*:", body):
            out.append(f"{indent}ssh_private_key: {key}")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def check(original: dict, copy: dict, subnet: str) -> None:
    net = ipaddress.ip_network(subnet)
    addresses = [copy["provider"]["head_ip"], *copy["provider"]["worker_ips"]]
    outside = [a for a in addresses if ipaddress.ip_address(a) not in net]
    if outside:
        sys.exit(f"lab config: {outside} outside {subnet}")
    a, b = dict(original), dict(copy)
    a["provider"] = {k: v for k, v in a["provider"].items() if k not in ("head_ip", "worker_ips")}
    b["provider"] = {k: v for k, v in b["provider"].items() if k not in ("head_ip", "worker_ips")}
    a["auth"] = {k: v for k, v in a["auth"].items() if k not in ("ssh_user", "ssh_private_key")}
    b["auth"] = {k: v for k, v in b["auth"].items() if k not in ("ssh_user", "ssh_private_key")}
    if a != b:
        sys.exit("lab config: the copy differs from the original beyond addresses, user and key")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source")
    ap.add_argument("out")
    ap.add_argument("--head", required=True)
    ap.add_argument("--workers", required=True, help="comma-separated addresses")
    ap.add_argument("--user", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--subnet", default="10.77.0.0/24")
    args = ap.parse_args()
    text = open(args.source).read()
    workers = args.workers.split(",")
    copy = rewrite(text, args.head, workers, args.user, args.key)
    original, parsed = yaml.safe_load(text), yaml.safe_load(copy)
    if len(original["provider"]["worker_ips"]) != len(workers):
        sys.exit(f"lab config: the file lists {len(original['provider']['worker_ips'])} workers, "
                 f"the lab has {len(workers)}")
    check(original, parsed, args.subnet)
    if parsed["provider"]["head_ip"] != args.head or parsed["provider"]["worker_ips"] != workers \
            or parsed["auth"]["ssh_user"] != args.user or parsed["auth"]["ssh_private_key"] != args.key:
        sys.exit("lab config: the addresses, user or key were not replaced")
    open(args.out, "w").write(copy)


if __name__ == "__main__":
    main()
