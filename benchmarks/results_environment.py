"""The environment block of the results files the report benchmarks generate, as the run wrapper writes it (host
bench, one device, no image ID or digest, a clean checkout): bench_report.py and bench_html_page.py share it."""

from __future__ import annotations


def environment(
    device: str, image: str, lock_sha256: str, distributions: list[str], *, torch: str, git_revision: str
) -> dict:
    return {
        "host": "bench",
        "device_type": device,
        "device_name": f"{device} device",
        "device_count": 1,
        "python": "3.11.7",
        "torch": torch,
        "torch_xla": None,
        "torch_tpu": None,
        "image": image,
        "image_id": None,
        "image_digest": None,
        "lock_sha256": lock_sha256,
        "git_revision": git_revision,
        "git_dirty": False,
        "distributions": distributions,
    }
