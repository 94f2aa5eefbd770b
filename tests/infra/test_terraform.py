"""The Terraform, read with python-hcl2: the security and scaling properties issue 5 asks for."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .tfdoc import (
    NVENC_FAMILIES,
    RENDER_ONLY_FAMILIES,
    TERRAFORM_DIR,
    blocks,
    load_tf,
    module_calls,
    one,
    tf_files,
    variables,
)

TF = dict[Path, dict[str, Any]]
WORLD = {"0.0.0.0/0", "::/0"}


def test_every_terraform_file_parses(tf: TF) -> None:
    # GIVEN the root module and its modules WHEN parsed THEN each yields blocks
    assert len(tf) == len(tf_files()) >= 10
    assert all(doc for doc in tf.values())


def test_imdsv2_is_required_everywhere(tf: TF) -> None:
    found = list(blocks(tf, "resource", "aws_launch_template"))
    found += list(blocks(tf, "resource", "aws_instance"))
    assert len(found) >= 2
    for path, name, body in found:
        metadata = one(body, "metadata_options")
        assert metadata["http_tokens"] == "required", f"{path}:{name} allows IMDSv1"
        assert metadata["http_endpoint"] == "enabled", f"{path}:{name}"


def test_worker_hop_limit_is_two_and_says_why(tf: TF) -> None:
    [(path, _, body)] = list(blocks(tf, "resource", "aws_launch_template"))
    assert one(body, "metadata_options")["http_put_response_hop_limit"] == 2
    text = (TERRAFORM_DIR / path).read_text()
    reason = text[: text.index("http_put_response_hop_limit")].rsplit("metadata_options", 1)[1]
    assert "container" in reason and "hop" in reason, "the hop limit of 2 needs its reason"


def test_worker_root_volume_is_encrypted_and_there_is_no_public_ip(tf: TF) -> None:
    [(_, _, body)] = list(blocks(tf, "resource", "aws_launch_template"))
    assert one(one(body, "block_device_mappings"), "ebs")["encrypted"] is True
    assert one(body, "network_interfaces")["associate_public_ip_address"] is False
    for _, _, instance in blocks(tf, "resource", "aws_instance"):
        assert instance["associate_public_ip_address"] is False
        assert one(instance, "root_block_device")["encrypted"] is True


def _port(tf: TF, value: object) -> object:
    """A port literal, or the network module's local it names."""
    if isinstance(value, str) and value.startswith("${local."):
        doc = tf[Path("modules/network/main.tf")]
        merged = {k: v for entry in doc["locals"] for k, v in entry.items()}
        return merged[value.removeprefix("${local.").removesuffix("}")]
    return value


def _rules_into(tf: TF, group: str) -> list[dict[str, Any]]:
    return [
        body
        for _, _, body in blocks(tf, "resource", "aws_vpc_security_group_ingress_rule")
        if body["security_group_id"] == f"${{aws_security_group.{group}.id}}"
    ]


def test_redis_admits_only_workers_and_control_plane(tf: TF) -> None:
    rules = _rules_into(tf, "redis")
    sources = {rule.get("referenced_security_group_id") for rule in rules}
    assert sources == {"${aws_security_group.workers.id}", "${aws_security_group.control_plane.id}"}
    assert all("cidr_ipv4" not in r and "cidr_ipv6" not in r for r in rules)
    assert all(_port(tf, r["from_port"]) == _port(tf, r["to_port"]) == 6379 for r in rules)


def test_flower_is_reached_only_through_session_manager(tf: TF) -> None:
    """Flower's /metrics and /healthcheck skip its basic auth: it listens on the control plane's
    loopback, no security group admits anything into the control plane, and the way in is
    Session Manager port forwarding (TLS to AWS, IAM-authorized)."""
    assert _rules_into(tf, "control_plane") == []
    assert "flower_allowed_cidrs" not in variables(tf)
    user_data = (TERRAFORM_DIR / "modules/control_plane/user-data.sh.tftpl").read_text()
    assert 'unit flower "flower --address 127.0.0.1 --port 5555"' in user_data
    assert "0.0.0.0" not in user_data
    tunnel = (TERRAFORM_DIR / "outputs.tf").read_text()
    assert "AWS-StartPortForwardingSession" in tunnel and "portNumber=5555" in tunnel
    # No security group carries inline ingress that could bypass the rules above.
    for _, name, group in blocks(tf, "resource", "aws_security_group"):
        assert "ingress" not in group, f"{name} has inline ingress"


def test_bucket_policy_denies_plain_http_and_tls_below_1_2(tf: TF) -> None:
    [(_, _, doc)] = list(blocks(tf, "data", "aws_iam_policy_document", under="modules/storage"))
    conditions = {
        (c["test"], c["variable"], tuple(c["values"]))
        for statement in doc["statement"]
        if statement["effect"] == "Deny" and statement["actions"] == ["s3:*"]
        for c in statement["condition"]
    }
    assert ("Bool", "aws:SecureTransport", ("false",)) in conditions
    assert ("NumericLessThan", "s3:TlsVersion", ("1.2",)) in conditions
    [(_, _, policy)] = list(blocks(tf, "resource", "aws_s3_bucket_policy"))
    assert policy["policy"] == "${data.aws_iam_policy_document.tls_only.json}"


def test_bucket_is_private_kms_encrypted_and_versioned(tf: TF) -> None:
    [(_, _, pab)] = list(blocks(tf, "resource", "aws_s3_bucket_public_access_block"))
    for flag in ("block_public_acls", "block_public_policy", "ignore_public_acls"):
        assert pab[flag] is True, flag
    assert pab["restrict_public_buckets"] is True
    [(_, _, owner)] = list(blocks(tf, "resource", "aws_s3_bucket_ownership_controls"))
    assert one(owner, "rule")["object_ownership"] == "BucketOwnerEnforced"
    [(_, _, sse)] = list(
        blocks(tf, "resource", "aws_s3_bucket_server_side_encryption_configuration")
    )
    rule = one(sse, "rule")
    assert one(rule, "apply_server_side_encryption_by_default")["sse_algorithm"] == "aws:kms"
    assert rule["bucket_key_enabled"] is True
    [(_, _, key)] = list(blocks(tf, "resource", "aws_kms_key"))
    assert key["enable_key_rotation"] is True
    [(_, _, versioning)] = list(blocks(tf, "resource", "aws_s3_bucket_versioning"))
    assert one(versioning, "versioning_configuration")["status"] == "Enabled"


def test_lifecycle_aborts_multipart_and_expires_intermediate_chunk_data(tf: TF) -> None:
    [(_, _, lifecycle)] = list(blocks(tf, "resource", "aws_s3_bucket_lifecycle_configuration"))
    rules = {rule["id"]: rule for rule in lifecycle["rule"]}
    abort = one(rules["abort-incomplete-multipart-uploads"], "abort_incomplete_multipart_upload")
    assert abort["days_after_initiation"] >= 7  # a job's early upload lives while it renders
    intermediate = one(one(rules["expire-intermediate-chunk-data"], "filter"), "and")
    assert intermediate["prefix"] == "jobs/"
    assert intermediate["tags"] == {"farm-data": "intermediate"}
    assert all(rule["status"] == "Enabled" for rule in rules.values())


def test_lifecycle_drops_staged_uploads_no_submit_took_after_a_day(tf: TF) -> None:
    [(_, _, lifecycle)] = list(blocks(tf, "resource", "aws_s3_bucket_lifecycle_configuration"))
    rule = {rule["id"]: rule for rule in lifecycle["rule"]}["expire-abandoned-uploads"]
    assert one(rule, "filter")["prefix"] == "uploads/"
    assert one(rule, "expiration")["days"] == 1
    assert one(rule, "noncurrent_version_expiration")["noncurrent_days"] == 1
    assert one(rule, "abort_incomplete_multipart_upload")["days_after_initiation"] == 1


def test_redis_is_encrypted_and_its_users_passwords_come_from_secrets_manager(tf: TF) -> None:
    [(_, _, redis)] = list(blocks(tf, "resource", "aws_elasticache_replication_group"))
    assert redis["transit_encryption_enabled"] is True
    assert redis["at_rest_encryption_enabled"] is True
    assert redis["automatic_failover_enabled"] is True
    assert redis["user_group_ids"] == ["${aws_elasticache_user_group.farm.user_group_id}"]
    assert "auth_token" not in redis, "one token for every role: the users replace it"
    [(_, _, user)] = list(blocks(tf, "resource", "aws_elasticache_user"))
    assert one(user, "authentication_mode")["passwords"] == ["${var.passwords[each.key]}"]
    calls = module_calls(tf)
    assert calls["broker"]["passwords"] == "${module.secrets.redis_passwords}"
    assert calls["secrets"]["redis_users"] == "${module.broker.users}"
    [(_, _, version)] = list(blocks(tf, "resource", "aws_secretsmanager_secret_version"))
    assert version["secret_string"] == "${local.values[each.key]}"
    assert not {"auth_token", "passwords"} & set(variables(tf)), "never a root variable"


def test_every_secret_is_one_for_each_instance_under_the_farms_key(tf: TF) -> None:
    [(_, _, secret)] = list(blocks(tf, "resource", "aws_secretsmanager_secret"))
    assert secret["for_each"] == "${local.secrets}"
    assert secret["name"] == "${var.name}/${each.key}"
    assert secret["kms_key_id"] == "${var.kms_key_arn}"
    # Flower's and the webhook's secrets, one block each before, keep their state.
    moved = {(m["from"], m["to"]) for m in tf[Path("modules/secrets/main.tf")]["moved"]}
    for name, key in (("flower", "flower-basic-auth"), ("webhook", "webhook-signing-key")):
        for type_ in ("aws_secretsmanager_secret", "aws_secretsmanager_secret_version"):
            assert (f"${{{type_}.{name}}}", f'${{{type_}.farm["{key}"]}}') in moved


def test_user_data_reads_secrets_at_boot_and_never_embeds_them() -> None:
    for template in TERRAFORM_DIR.rglob("*.tftpl"):
        text = template.read_text()
        assert "aws secretsmanager get-secret-value" in text, template
        assert "auth_token" not in text and "random_password" not in text, template


def test_worker_user_data_runs_the_gpu_container_and_drains_it() -> None:
    text = (TERRAFORM_DIR / "modules/workers/user-data.sh.tftpl").read_text()
    assert "--gpus all" in text
    capabilities = text.split("NVIDIA_DRIVER_CAPABILITIES=", 1)[1].split()[0].split(",")
    assert {"video", "compute"} <= set(capabilities)
    assert "docker stop --time 150" in text and "--stop-timeout 150" in text
    assert "target-lifecycle-state" in text and "complete-lifecycle-action" in text


def _pools(tf: TF) -> dict[str, dict[str, Any]]:
    root = next(doc for path, doc in tf.items() if path == Path("main.tf"))
    [local_block] = [entry for entry in root["locals"] if "pools" in entry]
    return dict(local_block["pools"])


def _default_types(tf: TF, reference: str) -> list[str]:
    name = reference.removeprefix("${var.").removesuffix("}")
    return list(variables(tf)[name]["default"])


def _family(instance_type: str) -> str:
    return instance_type.split(".", 1)[0]


def test_encode_pools_use_only_nvenc_families(tf: TF) -> None:
    pools = _pools(tf)
    encode = [p for p in pools.values() if "encode" in p["queues"]]
    assert encode, "some pool must serve the encode queue"
    for pool in encode:
        families = {_family(t) for t in _default_types(tf, pool["instance_types"])}
        assert families <= NVENC_FAMILIES, f"no NVENC on {families - NVENC_FAMILIES}"


def test_render_only_pools_use_gpu_families(tf: TF) -> None:
    for pool in _pools(tf).values():
        if "encode" not in pool["queues"]:
            families = {_family(t) for t in _default_types(tf, pool["instance_types"])}
            assert families <= NVENC_FAMILIES | RENDER_ONLY_FAMILIES, families


def test_spot_pools_use_price_capacity_optimized_and_rebalance(tf: TF) -> None:
    [(_, _, group)] = list(blocks(tf, "resource", "aws_autoscaling_group"))
    assert group["capacity_rebalance"] is True
    distribution = one(one(group, "mixed_instances_policy"), "instances_distribution")
    assert distribution["spot_allocation_strategy"] == "price-capacity-optimized"
    assert distribution["on_demand_base_capacity"] == "${var.on_demand_base_capacity}"
    assert variables(tf)["on_demand_base_capacity"]["default"] == 0
    assert module_calls(tf)["workers"]["min_size"] == 0


def test_pools_track_backlog_per_worker_per_queue(tf: TF) -> None:
    policies = blocks(tf, "resource", "aws_autoscaling_policy", under="modules/workers")
    [policy] = [body for _, name, body in policies if name == "backlog"]
    assert policy["policy_type"] == "TargetTrackingScaling"
    assert policy["for_each"] == "${toset(var.queues)}"
    metric = one(one(policy, "target_tracking_configuration"), "customized_metric_specification")
    assert metric["metric_name"] == "BacklogPerWorker"
    dimensions = {d["name"]: d["value"] for d in metric["metric_dimension"]}
    assert dimensions == {"Farm": "${var.farm_name}", "Queue": "${each.key}"}
    assert module_calls(tf)["workers"]["metric_namespace"] == "Farm"


def test_example_variables_exist_and_keep_spot_only_default(tf: TF) -> None:
    values = load_tf(TERRAFORM_DIR / "terraform.tfvars.example")
    assert set(values) <= set(variables(tf)), "the example sets a variable that does not exist"
    assert values["on_demand_base_capacity"] == 0


def test_each_host_reads_only_its_roles_secrets(tf: TF) -> None:
    """A worker (which runs untrusted scenes) never fetches Flower's password, the webhook key
    or another role's Redis password; the control plane fetches its three."""
    secret_ids = re.compile(r"--secret-id '\$\{(\w+)\}'")
    read = {
        module: set(
            secret_ids.findall((TERRAFORM_DIR / f"modules/{module}/user-data.sh.tftpl").read_text())
        )
        for module in ("workers", "control_plane")
    }
    assert read == {
        "workers": {"redis_secret_arn"},
        "control_plane": {"redis_secret_arn", "flower_secret_arn", "webhook_secret_arn"},
    }
    calls = module_calls(tf)
    for module, role in (("workers", "worker"), ("control_plane", "control")):
        assert (
            calls[module]["redis_secret_arn"] == f'${{module.secrets.redis_secret_arns["{role}"]}}'
        )
        assert calls[module]["redis_user"] == f'${{module.broker.user_names["{role}"]}}'
        text = (TERRAFORM_DIR / f"modules/{module}/user-data.sh.tftpl").read_text()
        assert "FARM_REDIS_URL=rediss://${redis_user}:$${password}@" in text, module
    control = (TERRAFORM_DIR / "modules/control_plane/user-data.sh.tftpl").read_text()
    assert "FARM_WEBHOOK_SECRET=" in control and "unset password flower webhook" in control
