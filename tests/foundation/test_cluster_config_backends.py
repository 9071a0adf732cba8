"""The cluster config's kubernetes and tpu sections and scale_groups: defaults and strict errors
that name the field."""

from __future__ import annotations

import pytest

from scheduler.foundation.cluster_config import ClusterConfigError, parse_cluster_config
from scheduler.core.bands import Band


def test_without_the_sections_no_cloud_backend_is_enabled():
    config = parse_cluster_config({})
    assert config.kubernetes.enabled is False
    assert config.tpu.enabled is False
    assert config.scale_groups == ()


def test_a_kubernetes_section_enables_it_with_iris_defaults():
    config = parse_cluster_config({"kubernetes": {"namespace": "ml", "queue_name": "gpu"}}).kubernetes
    assert (config.enabled, config.namespace, config.queue_name, config.promotions_per_minute) == (
        True,
        "ml",
        "gpu",
        128,
    )
    classes = {band: (c.name, c.value, c.preemption_policy) for band, c in config.priority_classes.items()}
    assert classes == {
        Band.SYSTEM: ("iris-system", 10000, "PreemptLowerPriority"),
        Band.PRODUCTION: ("iris-production", 1000, "PreemptLowerPriority"),
        Band.INTERACTIVE: ("iris-interactive", 10, "PreemptLowerPriority"),
        Band.BATCH: ("iris-batch", 0, "Never"),
    }


def test_priority_classes_can_be_renamed_and_revalued():
    config = parse_cluster_config(
        {"kubernetes": {"priority_classes": {"interactive": {"name": "lab-interactive", "value": 100}}}}
    ).kubernetes
    assert (config.priority_classes[Band.INTERACTIVE].name, config.priority_classes[Band.INTERACTIVE].value) == (
        "lab-interactive",
        100,
    )
    assert config.priority_classes[Band.BATCH].name == "iris-batch"


def test_a_disabled_section_is_kept_but_off():
    assert parse_cluster_config({"kubernetes": {"enabled": False}}).kubernetes.enabled is False


def test_scale_groups_take_the_tpu_zone_by_default():
    config = parse_cluster_config(
        {
            "tpu": {"project": "lab", "zone": "us-central2-b"},
            "scale_groups": [
                {
                    "name": "v5p",
                    "accelerator_type": "v5p-8",
                    "runtime_version": "v2-alpha-tpuv5",
                    "spot": True,
                    "max_slices": 4,
                }
            ],
        }
    )
    (group,) = config.scale_groups
    assert (group.zone, group.spot, group.min_slices, group.max_slices, group.device_variant) == (
        "us-central2-b",
        True,
        0,
        4,
        "v5p-8",
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kubernetes": {"namespce": "ml"}}, "kubernetes.namespce: unknown key"),
        ({"kubernetes": {"enabled": "yes"}}, "kubernetes.enabled: expected true or false"),
        ({"kubernetes": {"namespace": "Bad_Name"}}, "kubernetes.namespace: 'Bad_Name' is not a valid name"),
        ({"kubernetes": {"promotions_per_minute": 0}}, "kubernetes.promotions_per_minute: expected an integer >= 1"),
        ({"kubernetes": {"device_types": ["tpu"]}}, "kubernetes.device_types: expected a list of 'cpu' and/or 'gpu'"),
        (
            {"kubernetes": {"api_server": "localhost:6443"}},
            "kubernetes.api_server: expected an http:// or https:// URL",
        ),
        ({"kubernetes": {"priority_classes": {"urgent": {}}}}, "kubernetes.priority_classes.urgent: unknown key"),
        (
            {"kubernetes": {"priority_classes": {"batch": {"preemption_policy": "Sometimes"}}}},
            "kubernetes.priority_classes.batch.preemption_policy: expected one of",
        ),
        (
            {"kubernetes": {"priority_classes": {"batch": {"value": 5000}}}},
            "kubernetes.priority_classes: values must not rise from system to batch",
        ),
        (
            {"kubernetes": {"priority_classes": {"batch": {"name": "iris-system"}}}},
            "kubernetes.priority_classes: each band needs its own class name",
        ),
        ({"tpu": {"zone": "z"}}, "tpu.project: missing"),
        (
            {"tpu": {"project": "p", "provisioning": "magic"}},
            "tpu.provisioning: expected 'nodes' or 'queued_resources'",
        ),
        ({"tpu": {"project": "p", "idle_timeout_seconds": -1}}, "tpu.idle_timeout_seconds: expected an integer >= 0"),
        ({"scale_groups": {"name": "x"}}, "scale_groups: expected a list"),
        (
            {"scale_groups": [{"name": "v5p", "runtime_version": "r", "zone": "z"}]},
            "scale_groups[0].accelerator_type: missing",
        ),
        (
            {"scale_groups": [{"name": "v5p", "accelerator_type": "v5p-8", "runtime_version": "r"}]},
            "scale_groups[0].zone: missing",
        ),
        (
            {
                "scale_groups": [
                    {
                        "name": "v5p",
                        "accelerator_type": "a",
                        "runtime_version": "r",
                        "zone": "z",
                        "min_slices": 3,
                        "max_slices": 1,
                    }
                ]
            },
            "scale_groups[0].min_slices: 3 is above max_slices 1",
        ),
        (
            {
                "scale_groups": [
                    {"name": "a", "accelerator_type": "x", "runtime_version": "r", "zone": "z"},
                    {"name": "a", "accelerator_type": "x", "runtime_version": "r", "zone": "z"},
                ]
            },
            "scale_groups[1].name: duplicate scale group 'a'",
        ),
    ],
)
def test_invalid_backend_settings_name_the_field(data, message):
    with pytest.raises(ClusterConfigError) as error:
        parse_cluster_config(data)
    assert message in str(error.value)
