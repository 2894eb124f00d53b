"""The KEDA + HPA model follows the HPA controller's arithmetic and KEDA's activation rules."""

from __future__ import annotations

from poolsim.kedahpa import KedaHpaConfig, KedaHpaModel


def model(**kw: int) -> KedaHpaModel:
    return KedaHpaModel(KedaHpaConfig(min_replica_count=kw.get("min", 0), max_replica_count=kw.get("max", 100)))


def test_activation_and_cooldown_are_keda_polls() -> None:
    m = model()
    assert m.keda_poll(0.0, 0, 0) is None
    assert m.keda_poll(30.0, 1, 0) == 1  # 0 -> 1 on the first non-empty poll
    assert m.keda_poll(60.0, 0, 3) is None
    assert m.keda_poll(300.0, 0, 3) is None  # 270 s inactive
    assert m.keda_poll(330.0, 0, 3) == 0  # cooldownPeriod 300 s after the last active poll
    assert model(min=2).keda_poll(0.0, 5, 0) == 2


def test_hpa_ignores_zero_and_never_goes_below_one() -> None:
    m = model()
    assert m.hpa_sync(0.0, 100, 0) is None
    m = model()
    m.hpa_sync(0.0, 5, 1)
    assert m.hpa_sync(400.0, 0, 1) is None  # desired 0 clamps to the HPA's minReplicas 1


def test_tolerance() -> None:
    m = model()
    assert m.hpa_sync(0.0, 52, 10) is None  # ratio 1.04, within 0.1
    assert model().hpa_sync(0.0, 56, 10) == 12  # ratio 1.12: ceil(56 / 5)


def test_scale_up_rate_limit_max_of_100_percent_and_4_pods() -> None:
    m = model()
    assert m.hpa_sync(0.0, 1000, 1) == 5  # 1 + 4 beats 2 x 1
    assert m.hpa_sync(15.0, 1000, 5) == 10  # the period start is now 5: 2 x 5
    assert m.hpa_sync(30.0, 1000, 10) == 20
    m = model()
    assert m.hpa_sync(0.0, 1000, 1) == 5
    assert m.hpa_sync(5.0, 1000, 5) is None  # still within the same 15 s period from 1


def test_scale_down_stabilization_window() -> None:
    m = model()
    assert m.hpa_sync(0.0, 100, 20) is None  # 20 recommended
    for t in range(15, 300, 15):
        assert m.hpa_sync(float(t), 0, 20) is None, t  # the 300 s window still holds 20
    assert m.hpa_sync(315.0, 0, 20) == 1  # then down at once (100 % per 15 s), to minReplicas 1


def test_max_replicas() -> None:
    m = model(max=8)
    assert m.hpa_sync(0.0, 10_000, 6) == 8
