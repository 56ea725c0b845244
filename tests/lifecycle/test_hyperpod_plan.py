"""Unit tests for plan.py: input validation, node role, step plan, config-file edits."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mlcluster.lifecycle.hyperpod import HYPERPOD_DIR
from mlcluster.lifecycle.hyperpod import plan as p
from tests.lifecycle.hyperpod_sandbox import CONTROLLER_IP, FEATURES, LOGIN_IP, PROVISIONING, WORKER_IP, resource_config

PARAMS = p.parse_provisioning(PROVISIONING)
ALL_ON = p.parse_features({**FEATURES, "observability": True})
REMOTE = {
    "mode": "remote",
    "endpoint": "db.internal:3307",
    "secret_arn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:db-AbC",
}


# --- mlcluster_features.json -------------------------------------------------------------------


def test_features_defaults_match_the_environment_yaml_defaults() -> None:
    features = p.parse_features({})
    assert features == p.Features(
        users=(),
        accounting=p.Accounting("local"),
        docker=True,
        enroot_pyxis=True,
        home_on_fsx=True,
        observability=False,
    )


def test_features_full_example_parses() -> None:
    features = p.parse_features({**FEATURES, "accounting": REMOTE})
    assert features.users == (p.User("alice", 2001), p.User("bob", 2002))
    assert features.accounting.host == "db.internal"
    assert features.accounting.port == 3307
    assert features.accounting.secret_region == "eu-west-1"


def test_local_accounting_uses_localhost_and_the_default_port() -> None:
    accounting = p.parse_features({"accounting": {"mode": "local"}}).accounting
    assert (accounting.host, accounting.port, accounting.secret_region) == ("localhost", 3306, "")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"dockr": True}, "dockr = True is not valid; unknown key; allowed keys: users, accounting"),
        (
            {"users": [{"name": "alice", "uid": 99}]},
            "users[0].uid = 99 is not valid; allowed: an integer UID from 1000 to 60000",
        ),
        ({"users": [{"name": "Alice", "uid": 2001}]}, "users[0].name = 'Alice' is not valid"),
        ({"users": [{"uid": 2001}]}, "users[0].name is missing"),
        ({"users": [{"name": "a", "uid": 2001, "home": "/x"}]}, "users[0].home = '/x' is not valid; unknown key"),
        ({"users": [{"name": "a", "uid": 2001}, {"name": "a", "uid": 2002}]}, "user names must be unique"),
        ({"users": [{"name": "a", "uid": 2001}, {"name": "b", "uid": 2001}]}, "UIDs must be unique"),
        ({"users": [{"name": "a", "uid": True}]}, "users[0].uid = True is not valid"),
        ({"accounting": {"mode": "cloud"}}, "accounting.mode = 'cloud' is not valid; allowed: none, local, remote"),
        (
            {"accounting": {"mode": "remote", "secret_arn": REMOTE["secret_arn"]}},
            "accounting.endpoint is missing; required with mode 'remote'",
        ),
        (
            {"accounting": {"mode": "remote", "endpoint": "db"}},
            "accounting.secret_arn is missing; required with mode 'remote'",
        ),
        (
            {"accounting": {"mode": "local", "endpoint": "db"}},
            "endpoint and secret_arn are only used with mode 'remote'",
        ),
        ({"accounting": {**REMOTE, "endpoint": "db:port"}}, "accounting.endpoint = 'db:port' is not valid"),
        (
            {"accounting": {**REMOTE, "secret_arn": "arn:aws:s3:::bucket"}},
            "accounting.secret_arn = 'arn:aws:s3:::bucket' is not valid",
        ),
        ({"docker": "yes"}, "docker = 'yes' is not valid; allowed: true or false"),
        ({"docker": False}, "Enroot and Pyxis import images through Docker; set docker to true"),
        ([], "(top level) = [] is not valid; allowed: a JSON object"),
    ],
)
def test_bad_features_name_the_key_the_value_and_what_is_allowed(data: object, expected: str) -> None:
    with pytest.raises(p.LifecycleInputError) as err:
        p.parse_features(data)
    assert str(err.value).startswith("mlcluster_features.json: ")
    assert expected in str(err.value)


# --- provisioning_parameters.json ---------------------------------------------------------------


def test_provisioning_parameters_parse() -> None:
    assert PARAMS.controller_group == "controller-machine"
    assert PARAMS.login_group == "login-group"
    assert PARAMS.worker_groups == (p.WorkerGroup("worker-group-1", "p5"),)
    assert PARAMS.fsx_mountname == "abcdefgh"


def test_partition_defaults_to_the_group_name_and_unknown_keys_are_left_to_hyperpod() -> None:
    data = {**PROVISIONING, "worker_groups": [{"instance_group_name": "gpu"}], "slurm_configurations": {}}
    del data["login_group"]
    params = p.parse_provisioning(data)
    assert params.worker_groups == (p.WorkerGroup("gpu", "gpu"),)
    assert params.login_group is None


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"workload_manager": "k8s"}, "workload_manager = 'k8s' is not valid; allowed: 'slurm'"),
        ({"fsx_dns_name": None}, "fsx_dns_name = None is not valid; allowed: the FSx for Lustre DNS name"),
        ({"fsx_mountname": ""}, "fsx_mountname = '' is not valid"),
        ({"worker_groups": []}, "worker_groups = [] is not valid; allowed: at least one worker group"),
        ({"worker_groups": [{"partition_name": "p"}]}, "worker_groups[0].instance_group_name is missing"),
        ({"login_group": "controller-machine"}, "controller, login and worker group names must all differ"),
        ({"fsx_efa_enabled": "yes"}, "fsx_efa_enabled = 'yes' is not valid; allowed: true or false"),
        ({"fsx_efa_groups": ["worker-group-1"]}, "only used with fsx_efa_enabled: true"),
        (
            {"fsx_efa_enabled": True, "fsx_efa_groups": ["gpu"]},
            "fsx_efa_groups = ['gpu'] is not valid; allowed: the cluster's instance groups",
        ),
    ],
)
def test_bad_provisioning_parameters_are_named(change: dict[str, object], expected: str) -> None:
    with pytest.raises(p.LifecycleInputError, match=r"^provisioning_parameters\.json: ") as err:
        p.parse_provisioning({**PROVISIONING, **change})
    assert expected in str(err.value)


def test_missing_provisioning_key_is_named() -> None:
    data = dict(PROVISIONING)
    del data["fsx_mountname"]
    with pytest.raises(p.LifecycleInputError, match="fsx_mountname is missing"):
        p.parse_provisioning(data)


# --- node role ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("addresses", "role", "group", "partition"),
    [
        ([CONTROLLER_IP], "controller", "controller-machine", None),
        (["127.0.0.1", "172.17.0.1", WORKER_IP], "worker", "worker-group-1", "p5"),
        (["10.1.0.21"], "worker", "worker-group-1", "p5"),
        ([LOGIN_IP], "login", "login-group", None),
    ],
)
def test_node_role_comes_from_the_group_whose_instance_has_this_address(
    addresses: list[str], role: str, group: str, partition: str | None
) -> None:
    node = p.identify_node(resource_config(), PARAMS, addresses)
    assert (node.role, node.group, node.partition) == (role, group, partition)
    assert node.controller_address == CONTROLLER_IP
    assert node.address in addresses


def test_a_node_missing_from_resource_config_is_an_error() -> None:
    with pytest.raises(
        p.LifecycleInputError, match=r"addresses = \['10.9.9.9'\] is not valid; none of them is a CustomerIpAddress"
    ):
        p.identify_node(resource_config(), PARAMS, ["10.9.9.9"])


def test_a_group_unknown_to_the_provisioning_parameters_is_an_error() -> None:
    params = p.parse_provisioning({**PROVISIONING, "worker_groups": [{"instance_group_name": "other"}]})
    with pytest.raises(
        p.LifecycleInputError, match=r"'worker-group-1' is not valid; not in provisioning_parameters\.json"
    ):
        p.identify_node(resource_config(), params, [WORKER_IP])


def test_a_missing_controller_group_is_an_error() -> None:
    params = p.parse_provisioning({**PROVISIONING, "controller_group": "head"})
    with pytest.raises(p.LifecycleInputError, match="no group named 'head' \\(controller_group\\)"):
        p.identify_node(resource_config(), params, [WORKER_IP])


@pytest.mark.parametrize(
    ("address", "fsx_efa", "lustre_efa"),
    [(WORKER_IP, "true", "true"), (CONTROLLER_IP, "true", "false")],
)
def test_node_env_says_whether_this_node_reaches_lustre_over_efa(address: str, fsx_efa: str, lustre_efa: str) -> None:
    params = p.parse_provisioning({**PROVISIONING, "fsx_efa_enabled": True, "fsx_efa_groups": ["worker-group-1"]})
    node = p.identify_node(resource_config(), params, [address])
    env = p.node_env(node, params, ALL_ON)
    assert (env["MLC_FSX_EFA"], env["MLC_LUSTRE_EFA"], env["MLC_INSTANCE_TYPE"]) == (
        fsx_efa,
        lustre_efa,
        "ml.p5.48xlarge",
    )


def test_without_an_efa_file_system_no_node_uses_efa() -> None:
    env = p.node_env(p.identify_node(resource_config(), PARAMS, [WORKER_IP]), PARAMS, ALL_ON)
    assert (env["MLC_FSX_EFA"], env["MLC_LUSTRE_EFA"]) == ("false", "false")


P5_DEVICES = [f"rdmap{n}s0" for n in range(79, 79 + 32)]


@pytest.mark.parametrize(
    ("instance_type", "devices", "expected"),
    [
        # The guide's table: 8 interfaces on p5.48xlarge, one per PCI bus (every fourth of 32 devices).
        ("ml.p5.48xlarge", P5_DEVICES, sorted(P5_DEVICES)[::4]),
        ("p6-b300.48xlarge", [f"rdmap{n}s0" for n in range(100, 117)], [f"rdmap{n}s0" for n in range(100, 116)]),
        # Other types: the first and the last device with several network cards, else the only one.
        ("ml.g6e.48xlarge", ["rdmap36s0", "rdmap42s0", "rdmap40s0"], ["rdmap36s0", "rdmap42s0"]),
        ("ml.g6.8xlarge", ["rdmap36s0"], ["rdmap36s0"]),
    ],
)
def test_efa_interfaces_follow_the_fsx_guide(instance_type: str, devices: list[str], expected: list[str]) -> None:
    chosen = p.efa_interfaces(instance_type, devices)
    assert chosen == expected
    assert len(chosen) == p.EFA_INTERFACES_BY_TYPE.get(instance_type.removeprefix("ml."), len(chosen))


def test_efa_interfaces_without_a_device_is_an_error() -> None:
    with pytest.raises(p.LifecycleInputError, match="no EFA device found under /sys/class/infiniband"):
        p.efa_interfaces("ml.p5.48xlarge", [])


# --- step plan --------------------------------------------------------------------------------


def test_controller_step_order() -> None:
    assert p.plan_steps("controller", ALL_ON) == (
        "lustre_efa",
        "mount_fsx",
        "mount_openzfs",
        "imds",
        "add_users",
        "docker",
        "enroot_pyxis",
        "homes",
        "ssh_keys",
        "accounting",
        "start_slurm",
        "log_rotation",
        "observability",
        "install_tools",
    )


def test_worker_and_login_wait_for_the_controller_before_touching_shared_homes() -> None:
    expected = (
        "lustre_efa",
        "mount_fsx",
        "mount_openzfs",
        "add_users",
        "docker",
        "enroot_pyxis",
        "nccl_tests",
        "wait_controller",
        "homes",
        "ssh_keys",
        "start_slurm",
        "log_rotation",
        "observability",
        "install_tools",
    )
    assert p.plan_steps("worker", ALL_ON) == expected
    # Login nodes keep IMDS for root only (users work there) and build no nccl-tests.
    login = [step for step in expected if step != "nccl_tests"]
    login.insert(3, "imds")
    assert p.plan_steps("login", ALL_ON) == tuple(login)


def test_switched_off_features_drop_their_steps() -> None:
    features = p.parse_features(
        {"docker": False, "enroot_pyxis": False, "home_on_fsx": False, "accounting": {"mode": "none"}}
    )
    assert p.plan_steps("controller", features) == (
        "lustre_efa",
        "mount_fsx",
        "mount_openzfs",
        "imds",
        "homes",
        "ssh_keys",
        "start_slurm",
        "log_rotation",
        "install_tools",
    )


def test_every_step_has_a_script_and_every_script_is_a_step() -> None:
    scripts = {path.stem for path in (HYPERPOD_DIR / "steps").glob("*.sh")}
    assert scripts == {s.name for s in p.STEPS} | {p.IDENTIFY_STEP}


# --- node.env ---------------------------------------------------------------------------------


def test_node_env_survives_the_shell(tmp_path: Path) -> None:
    node = p.Node("worker", "worker-group-1", "w-1", WORKER_IP, CONTROLLER_IP, "p5")
    values = p.node_env(node, PARAMS, p.parse_features({**FEATURES, "accounting": REMOTE}))
    values["MLC_GROUP"] = 'it\'s $(rm -rf /) `x` "q"'
    env_file = tmp_path / "node.env"
    env_file.write_text(p.render_env(values))
    script = f'. {env_file}; printf "%s\\n" ' + " ".join(f'"${key}"' for key in values)
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == list(values.values())
    assert values["MLC_USERS"] == "alice:2001 bob:2002"
    assert values["MLC_ACCOUNTING_SECRET_REGION"] == "eu-west-1"
    assert values["MLC_DOCKER"] == "true"


# --- config-file edits --------------------------------------------------------------------------


def test_configless_is_added_to_existing_slurmctld_parameters_once() -> None:
    text = "# SlurmctldParameters=old\nClusterName=ml\nSlurmctldParameters=cloud_dns,idle_on_node_suspend\n"
    once = p.edit_slurm_conf(text, configless=True)
    assert "SlurmctldParameters=cloud_dns,idle_on_node_suspend,enable_configless\n" in once
    assert "# SlurmctldParameters=old\n" in once
    assert p.edit_slurm_conf(once, configless=True) == once


def test_configless_line_is_appended_when_missing() -> None:
    assert (
        p.edit_slurm_conf("ClusterName=ml\n", configless=True)
        == "ClusterName=ml\nSlurmctldParameters=enable_configless\n"
    )


def test_include_is_added_unless_present_by_any_path() -> None:
    path = "/opt/slurm/etc/accounting.conf"
    assert p.edit_slurm_conf("A=1\n", includes=[path]) == f"A=1\ninclude {path}\n"
    for present in ("include accounting.conf", "Include /opt/slurm/etc/accounting.conf", "include etc/accounting.conf"):
        assert p.edit_slurm_conf(f"{present}\n", includes=[path]) == f"{present}\n"
    assert p.edit_slurm_conf("", includes=[path]) == f"include {path}\n"


def test_settings_replace_the_last_value_or_are_appended() -> None:
    text = "CgroupPlugin=autodetect\n#ConstrainDevices=yes\nconstraindevices=no\n"
    edited = p.edit_slurm_conf(text, settings={"ConstrainDevices": "yes"})
    assert edited == "CgroupPlugin=autodetect\n#ConstrainDevices=yes\nConstrainDevices=yes\n"
    assert p.edit_slurm_conf("X=1\n", settings={"ConstrainDevices": "yes"}) == "X=1\nConstrainDevices=yes\n"
    assert p.edit_slurm_conf(edited, settings={"ConstrainDevices": "yes"}) == edited


@pytest.mark.parametrize("placeholder", ["$SLURMD_OPTIONS", "${SLURMD_OPTIONS}"])
def test_slurmd_unit_points_at_the_controller(placeholder: str) -> None:
    unit = f"[Service]\nExecStart=/opt/slurm/sbin/slurmd -D -s {placeholder}\n"
    edited = p.configless_unit(unit, "10.1.0.10:6817")
    assert edited == "[Service]\nExecStart=/opt/slurm/sbin/slurmd -D -s --conf-server 10.1.0.10:6817\n"
    assert p.configless_unit(edited, "10.1.0.10:6817") == edited


def test_slurmd_unit_without_placeholder_is_an_error() -> None:
    with pytest.raises(
        p.LifecycleInputError, match=r"found neither \$SLURMD_OPTIONS nor '--conf-server 10.1.0.10:6817'"
    ):
        p.configless_unit(
            "[Service]\nExecStart=/opt/slurm/sbin/slurmd -D --conf-server 10.9.9.9:6817\n", "10.1.0.10:6817"
        )


def test_fstab_gets_exactly_one_line_for_the_mount_point() -> None:
    entry = "fs@tcp:/m /fsx lustre defaults,noatime,flock,_netdev 0 0"
    text = "# /fsx comment\nLABEL=root / ext4 defaults 0 1\nold@tcp:/x /fsx lustre defaults 0 0\n\n"
    edited = p.fstab_with(text, entry, "/fsx")
    assert edited == f"# /fsx comment\nLABEL=root / ext4 defaults 0 1\n\n{entry}\n"
    assert p.fstab_with(edited, entry, "/fsx") == edited


@pytest.mark.parametrize(
    ("mounts", "expected"),
    [
        ("/dev/md0 /opt/dlami/nvme ext4 rw 0 0\n/dev/x /opt/sagemaker ext4 rw 0 0\n", "/opt/dlami/nvme"),
        ("/dev/root / ext4 rw 0 0\n/dev/x /opt/sagemaker ext4 rw 0 0\n", "/opt/sagemaker"),
        ("/dev/root / ext4 rw 0 0\n/dev/x /opt/dlami/nvme/sub ext4 rw 0 0\n", None),
        ("", None),
    ],
)
def test_local_root_is_the_first_mounted_local_volume(mounts: str, expected: str | None) -> None:
    assert p.choose_local_root(mounts) == expected


def test_local_root_honours_the_root_prefix_and_mount_escapes() -> None:
    mounts = "/dev/md0 /tmp/my\\040root/opt/sagemaker ext4 rw 0 0\n"
    assert p.choose_local_root(mounts, root="/tmp/my root") == "/opt/sagemaker"
    assert p.choose_local_root(mounts) is None


def test_docker_daemon_config_keeps_other_settings() -> None:
    current = json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "data-root": "/var/lib/docker"})
    merged = json.loads(p.docker_daemon_config(current, "/opt/dlami/nvme/docker/data-root"))
    assert merged == {
        "runtimes": {"nvidia": {"path": "nvidia-container-runtime"}},
        "data-root": "/opt/dlami/nvme/docker/data-root",
    }
    assert json.loads(p.docker_daemon_config(None, "/d")) == {"data-root": "/d"}
    assert json.loads(p.docker_daemon_config(" \n", "/d")) == {"data-root": "/d"}


def test_broken_docker_daemon_config_is_named() -> None:
    with pytest.raises(p.LifecycleInputError, match=r"/etc/docker/daemon\.json is not valid JSON"):
        p.docker_daemon_config("{not json", "/d")
    with pytest.raises(p.LifecycleInputError, match=r"daemon\.json: \(top level\) = \[1\] is not valid"):
        p.docker_daemon_config("[1]", "/d")


def test_secret_fields_and_errors_that_do_not_leak_the_secret() -> None:
    secret = json.dumps({"username": "admin", "password": "hunter2"})
    assert p.secret_field(secret, "username") == "admin"
    assert p.secret_field(secret, "password") == "hunter2"
    for broken in (json.dumps({"username": "admin", "pass": "hunter2"}), "hunter2 not json", json.dumps(["hunter2"])):
        with pytest.raises(p.LifecycleInputError) as err:
            p.secret_field(broken, "password")
        assert "hunter2" not in str(err.value)


def test_passwords_are_long_random_and_safe_to_quote() -> None:
    first, second = p.new_password(), p.new_password()
    assert len(first) == 32
    assert first != second
    assert set(first) <= set(p.PASSWORD_CHARS)


# --- command line ---------------------------------------------------------------------------------


def test_cli_identify_prints_node_env(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = {"rc.json": resource_config(), "pp.json": PROVISIONING, "f.json": FEATURES}
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
    argv = ["identify", "--resource-config", str(tmp_path / "rc.json"), "--provisioning", str(tmp_path / "pp.json")]
    assert p.main([*argv, "--features", str(tmp_path / "f.json"), "--addresses", f"172.16.0.1 {LOGIN_IP}"]) == 0
    out = capsys.readouterr().out
    assert "MLC_ROLE=login\n" in out
    assert f"MLC_CONTROLLER_ADDRESS={CONTROLLER_IP}\n" in out


def test_cli_bad_input_exits_2_with_the_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    features = tmp_path / "mlcluster_features.json"
    features.write_text(json.dumps({"observability": "on"}))
    assert p.main(["steps", "--role", "worker", "--features", str(features)]) == 2
    assert capsys.readouterr().err == f"error: {features}: observability = 'on' is not valid; allowed: true or false\n"


def test_cli_missing_or_broken_files_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert p.main(["steps", "--role", "worker", "--features", str(tmp_path / "nope.json")]) == 2
    assert f"cannot read {tmp_path / 'nope.json'}" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{")
    assert p.main(["steps", "--role", "worker", "--features", str(tmp_path / "bad.json")]) == 2
    assert f"{tmp_path / 'bad.json'} is not valid JSON" in capsys.readouterr().err


def test_cli_slurm_conf_missing_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = str(tmp_path / "plugstack.conf")
    assert p.main(["slurm-conf", "--conf", conf, "--missing-ok", "--include", "/x/pyxis.conf"]) == 0
    assert capsys.readouterr().out == "include /x/pyxis.conf\n"
    assert p.main(["slurm-conf", "--conf", conf]) == 2
    assert "cannot read" in capsys.readouterr().err
