"""PyTorchJob and JobSet manifests against the openAPIV3Schema their CRDs publish, made strict.

The CRDs are reference data outside the project (../shared/reference/k8s/). Without
them the test skips and says why; ENVKIT_REQUIRE_K8S_SCHEMAS=1 (CI) makes that a failure.
"""

from __future__ import annotations

import copy
import os
from functools import cache
from pathlib import Path

import jsonschema
import pytest
import yaml
from launch_jobs import REPO_ROOT, make_job

from envkit.launch import kubernetes, yaml_text

CRD_DIR = REPO_ROOT.parent / "shared" / "reference" / "k8s"
CRDS = {"PyTorchJob": "kubeflow-pytorchjob-crd.yaml", "JobSet": "jobset-crd.yaml"}


def strict(schema):
    """additionalProperties: false wherever properties are listed and unknown fields are not invited."""
    if isinstance(schema, dict):
        schema = {key: strict(value) for key, value in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    return schema


@cache
def validator(kind: str, api_version: str, crd_dir: Path = CRD_DIR):
    path = crd_dir / CRDS[kind]
    if not path.is_file():
        reason = f"published CRD {path} not found (CI has ../shared/reference/k8s/)"
        if os.environ.get("ENVKIT_REQUIRE_K8S_SCHEMAS") == "1":
            pytest.fail(f"ENVKIT_REQUIRE_K8S_SCHEMAS=1: {reason}")
        pytest.skip(reason)
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    group = crd["spec"]["group"]
    version = next(v for v in crd["spec"]["versions"] if f"{group}/{v['name']}" == api_version)
    schema = strict(version["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


def errors(manifest) -> list[str]:
    found = validator(manifest["kind"], manifest["apiVersion"]).iter_errors(manifest)
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in found)


MANIFESTS = {
    "pytorchjob-gpu": lambda: kubernetes.pytorchjob(make_job("gpu-ddp-cifar", "pytorchjob", gpus_per_node=8)),
    "pytorchjob-cpu-1-node": lambda: kubernetes.pytorchjob(
        make_job("cpu-ddp-cifar", "pytorchjob", nodes=1, nproc_per_node=4)
    ),
    "pytorchjob-single": lambda: kubernetes.pytorchjob(make_job("gpu-mnist", "pytorchjob", nodes=1)),
    "jobset-gpu": lambda: kubernetes.jobset(make_job("gpu-ddp-cifar", "jobset", nodes=4, gpus_per_node=8)),
    "jobset-cpu": lambda: kubernetes.jobset(make_job("cpu-ddp-cifar", "jobset", nproc_per_node=2)),
    "jobset-tpu": lambda: kubernetes.jobset(
        make_job(
            "tpu-mnist",
            "jobset",
            nodes=4,
            options=dict(tpu_accelerator="tpu-v5-lite-podslice", tpu_topology="4x4"),
        )
    ),
}


@pytest.mark.parametrize("case", sorted(MANIFESTS))
def test_manifest_matches_the_published_crd_strictly(case):
    assert errors(MANIFESTS[case]()) == []


@pytest.mark.parametrize("case", ["pytorchjob-gpu", "jobset-gpu"])
def test_strict_schema_catches_a_misspelt_field(case):
    manifest = MANIFESTS[case]()
    broken = copy.deepcopy(manifest)
    if manifest["kind"] == "PyTorchJob":
        replica = broken["spec"]["pytorchReplicaSpecs"]["Worker"]
        replica["restartPolcy"] = replica.pop("restartPolicy")
    else:
        pod = broken["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        pod["restartPolcy"] = pod.pop("restartPolicy")
    assert any("restartPolcy" in error for error in errors(broken))


def test_manifests_carry_what_the_engines_need():
    job = make_job("gpu-ddp-cifar", "pytorchjob", gpus_per_node=8)
    pytorchjob = kubernetes.pytorchjob(job)
    master = pytorchjob["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    container = master["containers"][0]
    assert container["name"] == "pytorch" and container["command"][:3] == [
        "python",
        "/opt/envkit/envkit_run.py",
        "torchrun",
    ]
    assert container["command"][3] == "recipes/cifar.py"  # a bare torchrun: settings from PET_*
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in master["volumes"]
    assert pytorchjob["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    assert pytorchjob["spec"]["nprocPerNode"] == "8"

    tpu = kubernetes.jobset(
        make_job(
            "tpu-mnist",
            "jobset",
            nodes=4,
            options=dict(tpu_accelerator="tpu-v5-lite-podslice", tpu_topology="4x4"),
        )
    )
    pod = tpu["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "4x4",
    }
    assert pod["hostNetwork"] is True and pod["containers"][0]["securityContext"] == {"privileged": True}
    assert {"name": "PJRT_DEVICE", "value": "TPU"} in pod["containers"][0]["env"]


def test_jobset_names_the_master_pod_and_the_rank_from_the_index():
    spec = kubernetes.jobset(make_job("cpu-ddp-cifar", "jobset", nproc_per_node=2))["spec"]
    env = {
        e["name"]: e for e in spec["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["PET_MASTER_ADDR"]["value"] == "cpu-ddp-cifar-node-0-0.cpu-ddp-cifar"
    assert env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == kubernetes.COMPLETION_INDEX
    assert spec["replicatedJobs"][0]["template"]["spec"]["completionMode"] == "Indexed"


def test_manifest_text_is_one_yaml_document_without_anchors():
    text = yaml_text.dump(MANIFESTS["pytorchjob-gpu"]())
    assert "&id" not in text and len(list(yaml.safe_load_all(text))) == 1


def test_without_the_crds_the_schema_test_skips_with_a_reason(tmp_path, monkeypatch):
    monkeypatch.delenv("ENVKIT_REQUIRE_K8S_SCHEMAS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not found"):
        validator("JobSet", kubernetes.JOBSET_API, tmp_path)
    monkeypatch.setenv("ENVKIT_REQUIRE_K8S_SCHEMAS", "1")
    with pytest.raises(pytest.fail.Exception, match="ENVKIT_REQUIRE_K8S_SCHEMAS=1"):
        validator("PyTorchJob", kubernetes.PYTORCHJOB_API, tmp_path / "other")
