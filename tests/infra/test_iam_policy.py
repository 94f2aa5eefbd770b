"""The farm's IAM policies, rendered by Terraform (modules/iam/policies) and evaluated (tests.infra.iam)
against every key the code uses, per role: what each role's code does is allowed, the rest is not.

Keys come from farm/core/keys.py with sample ids, so a renamed key is checked as renamed. What
each role does (the ALLOWED tables) is read from the code: the store calls in workers/ for the
worker; farm/control/reconcile.py and farm/web for the control plane; farm/cli and
farm/control/jobs.py for the submitter.
"""

from __future__ import annotations

import inspect
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from farm.core import keys
from farm.core.roles import Role

from .iam import Decision, Request, decide
from .tfdoc import TERRAFORM_DIR, blocks, find_tool, module_calls, variables

TF = dict[Path, dict[str, Any]]
BUCKET = "arn:aws:s3:::farm-bucket"
REGION = "eu-west-1"
KMS_KEY = f"arn:aws:kms:{REGION}:111122223333:key/farm"
SECRETS = {
    name: f"arn:aws:secretsmanager:{REGION}:111122223333:secret:farm/{name}"
    for name in (*(f"redis-{role}" for role in Role), "flower", "webhook")
}
ASG = f"arn:aws:autoscaling:{REGION}:111122223333:autoScalingGroup:*:autoScalingGroupName/farm-*"
ROLES = ("worker", "control", "submitter")
REDIS_ROLES = {"worker": Role.WORKER, "control": Role.CONTROL, "submitter": Role.CLI}
"""The Redis user (farm.core.roles) each IAM role's code runs as; admin's is no IAM role's."""
# Actions AWS offers no resource-level permissions for; each needs Resource "*".
UNSCOPABLE = {"ecr:GetAuthorizationToken", "cloudwatch:PutMetricData"}

SAMPLES: dict[str, Any] = {
    "job_id": "j-20261206-0001",
    "sha256": "ab" * 32,
    "frame": 12,
    "chunk": 3,
    "claim": 7,
    "writer": keys.writer(3, 7),  # an attempt's own names (fenced writes): chunk 3, claim 7
    "attempt": 2,
    "phase": "render",
    "name": "frame_000012.exr",
    "path": "Depth/Image0012.exr",
}


def _key(function: Callable[..., str], **given: Any) -> str:
    """function(...) with each parameter from `given`, else from SAMPLES, else its default."""
    arguments = {}
    for name, parameter in inspect.signature(function).parameters.items():
        if name in given or name in SAMPLES:
            arguments[name] = given.get(name, SAMPLES.get(name))
        elif parameter.default is inspect.Parameter.empty:
            raise TypeError(f"no sample for {function.__name__}({name})")
    return function(**arguments)


JOB_KEYS = {
    "spec": _key(keys.spec_key),
    "asset manifest": _key(keys.assets_manifest_key),
    "frame": _key(keys.frame_key),
    "thumbnail": _key(keys.thumb_key),
    "render master": _key(keys.master_key),
    "file output": _key(keys.file_output_key),
    "segment": _key(keys.segment_key),
    "manifest": _key(keys.manifest_key),
    "log": _key(keys.log_key),
    "output": _key(keys.output_key),
    "control record": _key(keys.control_key),
    "other job file": keys.job_prefix(SAMPLES["job_id"]) + "notes.txt",
}
KEYS = {
    "scene": _key(keys.scene_key),
    "video master": _key(keys.scene_key, suffix=".mov"),
    "asset": _key(keys.asset_key),
    "ledger mark": keys.ledger_mark_key(),
    "user record": keys.user_key("ada"),
    "staged upload": f"uploads/{SAMPLES['sha256']}",  # the API's presigned PUTs land here
    **JOB_KEYS,
}
SOURCES = {"scene", "video master", "asset"}
API = {"user record", "staged upload"}
"""What only the API (farm web, the control role) keeps: users, and uploads not yet submitted."""
API_SUBMIT = SOURCES | {"spec", "asset manifest"}
"""What a submit through the API writes, as the submitter's CLI does in direct mode."""
CHUNK_DATA = {"frame", "thumbnail", "render master", "file output", "segment", "manifest", "log"}

CREATE = {"s3:ObjectCreationOperation": "true"}
PART = {"s3:ObjectCreationOperation": "false"}
IF_ABSENT = {**CREATE, "s3:if-none-match": "*"}
# Each S3 call the farm makes, as the IAM requests S3 authorizes for it.
OPERATIONS: dict[str, list[tuple[str, dict[str, str]]]] = {
    "GetObject/HeadObject": [("s3:GetObject", {})],
    "PutObject": [("s3:PutObject", CREATE)],
    "PutObject If-None-Match": [("s3:PutObject", IF_ABSENT)],
    "PutObject tagged": [("s3:PutObject", CREATE), ("s3:PutObjectTagging", {})],
    "multipart upload": [("s3:PutObject", PART), ("s3:PutObject", PART), ("s3:PutObject", CREATE)],
    "AbortMultipartUpload": [("s3:AbortMultipartUpload", {})],
    "DeleteObject": [("s3:DeleteObject", {})],
}
WRITES = CHUNK_DATA | {"output"}
ALLOWED: dict[str, dict[str, set[str]]] = {
    # workers/phases: source.py and scene_tree.py read the sources and the asset manifest,
    # segment.py frames, stitch.py and s3join.py manifests, segments and the output; frames.py
    # copies a render master to its frame's key; Store.put_file looks up (HEAD) what it sent in
    # parts. They write chunk data and the output (s3join's multipart upload, aborted when
    # another worker began it first); frames, thumbnails and segments are tagged intermediate.
    # stitch.py's delete of an output that failed its checks is left refused.
    "worker": {
        "GetObject/HeadObject": SOURCES | {"asset manifest"} | WRITES,
        "PutObject": WRITES,
        "PutObject If-None-Match": WRITES,
        "PutObject tagged": {"frame", "thumbnail", "segment"},
        "multipart upload": WRITES,
        "AbortMultipartUpload": WRITES,
        "DeleteObject": set(),
    },
    # farm web reads thumbnails and logs and signs a link to the output; the reconciler aborts
    # the early upload (into the output's key) of a failed or cancelled job, reads a job back
    # to rebuild a ledger that lost it, and keeps jobs' ends and the ledger's mark
    # (farm.control.rebuild). farm web's API keeps the users, signs the staged uploads' PUTs,
    # reads them to hash them, moves them to their sources' keys (or drops them), looks the
    # sources up by HEAD, and writes a submitted job's record.
    "control": {
        "GetObject/HeadObject": set(JOB_KEYS) | {"ledger mark"} | API | SOURCES,
        "PutObject": {"control record", "ledger mark"} | API | API_SUBMIT,
        "PutObject If-None-Match": {"control record", "ledger mark"} | API | API_SUBMIT,
        "PutObject tagged": set(),
        "multipart upload": {"control record", "ledger mark"} | API | API_SUBMIT,
        "AbortMultipartUpload": {"output", "staged upload"} | SOURCES,
        "DeleteObject": {"staged upload"},
    },
    # farm submit and retry --scene upload sources by hash (a HEAD first) and write the job's
    # record (pause, resume, priority, cancel and retry its control record); fetch, logs and
    # retry's segment check read the job.
    "submitter": {
        "GetObject/HeadObject": SOURCES | set(JOB_KEYS),
        "PutObject": SOURCES | {"spec", "asset manifest", "control record"},
        "PutObject If-None-Match": SOURCES | {"spec", "asset manifest", "control record"},
        "PutObject tagged": set(),
        "multipart upload": SOURCES | {"spec", "asset manifest", "control record"},
        "AbortMultipartUpload": SOURCES,
        "DeleteObject": set(),
    },
}
WRITE_ONCE = ["jobs/*/manifests/*", "jobs/*/output.*", "scenes/*", "assets/*"]


def _terraform(
    root: Path, write_once_keys: list[str], redis_roles: tuple[Role, ...]
) -> tuple[str, subprocess.CompletedProcess[str]]:
    """terraform init and apply of the policies for sample ARNs (the Redis password secrets of
    `redis_roles`) in `root`: Terraform's path and the last command it ran."""
    root.mkdir(parents=True)
    arguments = {
        "bucket_arn": BUCKET,
        "kms_key_arn": KMS_KEY,
        "region": REGION,
        "redis_secret_arns": {str(role): SECRETS[f"redis-{role}"] for role in redis_roles},
        "flower_secret_arn": SECRETS["flower"],
        "webhook_secret_arn": SECRETS["webhook"],
        "worker_asg_arn": ASG,
        "ecr_repository_arn": "arn:aws:ecr:eu-west-1:111122223333:repository/farm",
        "metric_namespace": "Farm",
        "write_once_keys": write_once_keys,
    }
    source = TERRAFORM_DIR / "modules" / "iam" / "policies"
    module = {"source": str(source), **arguments}
    outputs = {role: {"value": f"${{module.policies.{role}}}"} for role in ROLES}
    config = {"module": {"policies": module}, "output": outputs}
    (root / "main.tf.json").write_text(json.dumps(config))
    terraform = find_tool(
        "terraform", "FARM_TERRAFORM", "install Terraform 1.5 or later (developer.hashicorp.com)"
    )
    for command in (["init", "-input=false"], ["apply", "-auto-approve", "-input=false"]):
        run = subprocess.run(
            [terraform, f"-chdir={root}", *command, "-no-color"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if run.returncode != 0:
            break
    return terraform, run


def _render(
    root: Path, write_once_keys: list[str], redis_roles: tuple[Role, ...] = tuple(Role)
) -> dict[str, dict[str, Any]]:
    """Each role's policy as Terraform renders it, for sample ARNs."""
    terraform, run = _terraform(root, write_once_keys, redis_roles)
    assert run.returncode == 0, f"{run.args}:\n{run.stdout}\n{run.stderr}"
    shown = subprocess.run(
        [terraform, f"-chdir={root}", "output", "-json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return {role: json.loads(out["value"]) for role, out in json.loads(shown.stdout).items()}


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return _render(tmp_path_factory.mktemp("iam") / "default", [])


@pytest.fixture(scope="module")
def write_once_policies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return _render(tmp_path_factory.mktemp("iam") / "write-once", WRITE_ONCE)


def _object(key: str) -> str:
    return f"{BUCKET}/{key}"


def _call(policy: dict[str, Any], operation: str, key: str) -> Decision:
    """What S3 answers the whole call: denied if any of its requests is."""
    decisions = [
        decide(policy, Request(action=action, resource=_object(key), context=context))
        for action, context in OPERATIONS[operation]
    ]
    return next((d for d in decisions if d != Decision.ALLOWED), Decision.ALLOWED)


@pytest.mark.parametrize("key_name", sorted(KEYS))
@pytest.mark.parametrize("operation", list(OPERATIONS))
@pytest.mark.parametrize("role", ROLES)
def test_each_role_may_do_exactly_what_its_code_does(
    policies: dict[str, dict[str, Any]], role: str, operation: str, key_name: str
) -> None:
    expected = key_name in ALLOWED[role][operation]
    decision = _call(policies[role], operation, KEYS[key_name])
    assert (decision == Decision.ALLOWED) == expected, (
        f"{role} {operation} {KEYS[key_name]} ({key_name}): {decision}, expected "
        f"{'allowed' if expected else 'refused'}"
    )


def test_workers_read_the_assets_of_textured_scenes(policies: dict[str, dict[str, Any]]) -> None:
    """The AWS bug this file was written for: no worker could read assets/*."""
    asset = Request(action="s3:GetObject", resource=_object(KEYS["asset"]))
    assert decide(policies["worker"], asset) == Decision.ALLOWED


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("prefix", ["", "scenes/", "assets/", keys.job_prefix(SAMPLES["job_id"])])
def test_every_role_may_list_so_a_missing_key_answers_404(
    policies: dict[str, dict[str, Any]], role: str, prefix: str
) -> None:
    listing = Request(action="s3:ListBucket", resource=BUCKET, context={"s3:prefix": prefix})
    assert decide(policies[role], listing) == Decision.ALLOWED


@pytest.mark.parametrize("role", ROLES)
def test_no_role_lists_uploads_or_touches_another_bucket(
    policies: dict[str, dict[str, Any]], role: str
) -> None:
    for action, resource in (
        ("s3:ListBucketMultipartUploads", BUCKET),
        ("s3:GetObject", "arn:aws:s3:::another-bucket/jobs/x/output.mp4"),
        ("s3:PutBucketPolicy", BUCKET),
        ("s3:PutObjectAcl", _object(KEYS["output"])),
    ):
        request = Request(action=action, resource=resource)
        assert decide(policies[role], request) != Decision.ALLOWED, (role, action, resource)


SECRET_READERS = {
    **{
        f"redis-{role}": {iam for iam, user in REDIS_ROLES.items() if user is role} for role in Role
    },
    "flower": {"control"},
    "webhook": {"control"},
}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("secret", sorted(SECRET_READERS))
def test_each_role_reads_only_its_own_secrets(
    policies: dict[str, dict[str, Any]], role: str, secret: str
) -> None:
    request = Request(action="secretsmanager:GetSecretValue", resource=SECRETS[secret])
    allowed = decide(policies[role], request) == Decision.ALLOWED
    assert allowed == (role in SECRET_READERS[secret])


def test_a_missing_roles_redis_secret_is_refused_by_name(tmp_path: Path) -> None:
    # GIVEN no secret for the cli user's password WHEN the policies render THEN Terraform
    # refuses and says which secrets to give, rather than a submitter policy reading nothing.
    _, run = _terraform(tmp_path / "no-cli", [], (Role.ADMIN, Role.CONTROL, Role.WORKER))
    assert run.returncode != 0
    said = " ".join(run.stderr.split())  # Terraform wraps its messages
    assert "Give the worker, control and cli roles' Redis password secrets" in said


@pytest.mark.parametrize(
    "role,action,service,expected",
    [
        ("worker", "kms:Decrypt", "s3", True),
        ("worker", "kms:GenerateDataKey", "s3", True),
        ("worker", "kms:Decrypt", "secretsmanager", True),
        ("worker", "kms:Decrypt", "", False),  # not straight from the host: only through S3
        ("worker", "kms:GenerateDataKey", "secretsmanager", False),
        ("control", "kms:Decrypt", "s3", True),
        ("control", "kms:GenerateDataKey", "s3", True),  # control records, the ledger's mark
        ("control", "kms:Decrypt", "secretsmanager", True),
        ("submitter", "kms:GenerateDataKey", "s3", True),
        ("submitter", "kms:Decrypt", "secretsmanager", True),
        ("submitter", "kms:Decrypt", "", False),
        ("worker", "kms:CreateGrant", "s3", False),
    ],
)
def test_the_farm_key_is_used_only_through_s3_and_secrets_manager(
    policies: dict[str, dict[str, Any]], role: str, action: str, service: str, expected: bool
) -> None:
    context = {"kms:ViaService": f"{service}.{REGION}.amazonaws.com"} if service else {}
    request = Request(action=action, resource=KMS_KEY, context=context)
    assert (decide(policies[role], request) == Decision.ALLOWED) == expected


def test_workers_finish_only_the_farms_termination_hooks(
    policies: dict[str, dict[str, Any]],
) -> None:
    ours = ASG.replace("*:autoScalingGroupName/farm-*", "uuid:autoScalingGroupName/farm-render")
    theirs = ours.replace("farm-render", "web-frontend")
    for resource, expected in ((ours, Decision.ALLOWED), (theirs, Decision.IMPLICIT_DENY)):
        request = Request(action="autoscaling:CompleteLifecycleAction", resource=resource)
        assert decide(policies["worker"], request) == expected
        assert decide(policies["control"], request) == Decision.IMPLICIT_DENY


def test_only_the_control_plane_publishes_and_only_the_farms_metrics(
    policies: dict[str, dict[str, Any]],
) -> None:
    def publish(role: str, namespace: str) -> Decision:
        context = {"cloudwatch:namespace": namespace}
        return decide(policies[role], Request(action="cloudwatch:PutMetricData", resource="*",
                                              context=context))  # fmt: skip

    assert publish("control", "Farm") == Decision.ALLOWED
    assert publish("control", "AWS/EC2") == Decision.IMPLICIT_DENY
    assert publish("worker", "Farm") == Decision.IMPLICIT_DENY


@pytest.mark.parametrize("role", ROLES)
def test_no_wildcard_action_and_no_wildcard_resource_but_where_aws_has_none(
    policies: dict[str, dict[str, Any]], role: str
) -> None:
    for statement in policies[role]["Statement"]:
        actions = set(statement["Action"])
        assert all(a != "*" and not a.endswith(":*") for a in actions), statement["Sid"]
        if "*" in statement["Resource"]:
            assert actions <= UNSCOPABLE, statement["Sid"]


# ── If-None-Match: keys created only where absent, once the code sends the header ─────────────


def test_no_write_once_deny_is_rendered_by_default(policies: dict[str, dict[str, Any]]) -> None:
    """The deny would refuse every write of today's code, which sends no If-None-Match."""
    for policy in policies.values():
        assert all(s["Effect"] == "Allow" for s in policy["Statement"])


@pytest.mark.parametrize(
    "role,key_name,operation,expected",
    [
        ("worker", "manifest", "PutObject", Decision.DENIED),
        ("worker", "manifest", "PutObject If-None-Match", Decision.ALLOWED),
        ("worker", "output", "PutObject", Decision.DENIED),
        ("worker", "output", "multipart upload", Decision.DENIED),  # its completion
        ("worker", "frame", "PutObject", Decision.ALLOWED),  # not listed: unaffected
        ("submitter", "scene", "PutObject", Decision.DENIED),
        ("submitter", "asset", "PutObject If-None-Match", Decision.ALLOWED),
        ("submitter", "spec", "PutObject", Decision.ALLOWED),
        ("control", "output", "AbortMultipartUpload", Decision.ALLOWED),
    ],
)
def test_write_once_keys_are_created_only_with_if_none_match(
    write_once_policies: dict[str, dict[str, Any]],
    role: str,
    key_name: str,
    operation: str,
    expected: Decision,
) -> None:
    assert _call(write_once_policies[role], operation, KEYS[key_name]) == expected


def test_a_multipart_upload_of_a_write_once_key_completes_with_if_none_match(
    write_once_policies: dict[str, dict[str, Any]],
) -> None:
    """Create, UploadPart and UploadPartCopy take no conditional header; the completion does."""
    worker, output = write_once_policies["worker"], _object(KEYS["output"])
    for context in (PART, IF_ABSENT):
        request = Request(action="s3:PutObject", resource=output, context=context)
        assert decide(worker, request) == Decision.ALLOWED


# ── The roles in Terraform use these documents ───────────────────────────────────────────────


def test_each_role_and_the_submitters_group_get_their_rendered_policy(tf: TF) -> None:
    policies = {
        name: body["policy"]
        for _, name, body in blocks(tf, "resource", "aws_iam_role_policy", under="modules/iam")
    }
    assert policies == {
        "worker": "${module.policies.worker}",
        "control_plane": "${module.policies.control}",
    }
    [(_, _, submitter)] = blocks(tf, "resource", "aws_iam_policy", under="modules/iam")
    assert submitter["policy"] == "${module.policies.submitter}"
    [(_, _, attachment)] = blocks(
        tf, "resource", "aws_iam_group_policy_attachment", under="modules/iam"
    )
    assert attachment["group"] == "${aws_iam_group.submitters.name}"
    assert not list(blocks(tf, "data", "aws_iam_policy_document", under="modules/iam/policies"))
    assert module_calls(tf)["iam"]["write_once_keys"] == "${var.write_once_keys}"
    # The secrets the matrix above checks are the farm's: each role's Redis password's.
    assert module_calls(tf)["iam"]["redis_secret_arns"] == "${module.secrets.redis_secret_arns}"
    # Every writer of a delivered output sends If-None-Match (the stitch): none may replace one.
    assert variables(tf)["write_once_keys"]["default"] == ["jobs/*/output.*"]
