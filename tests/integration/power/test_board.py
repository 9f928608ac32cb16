"""The board source and the inventory through the real nvidia-ml-py bindings, loaded against the
project's fake libnvidia-ml.so.1 (tests/fakes/fake_nvml.c) in a subprocess."""

from __future__ import annotations

import pytest

from tokenwatt import energy
from tokenwatt.errors import PowerError
from tokenwatt.power.board import nvml_error
from tokenwatt.schema.run import PowerEvidence


def evidence(result) -> PowerEvidence:
    return PowerEvidence.model_validate(result["evidence"])


def test_power_energy_and_reasons_of_the_gpus_in_use_follow_the_driver(fake_nvml, fake_nvml_libs):
    fake_nvml.set_state(
        count=4,
        power_mw__0=100000,
        power_mw__1=250500,
        power_mw__2=999000,  # not in use
        energy_mj__0=1_000_000,
        energy_mj__1=2_000_000,
        enforced_mw=700000,
        reasons=0,
    )
    result = fake_nvml.run(
        {
            "action": "sample",
            "gpus": [0, 1],
            "hz": 20,
            "steps": [
                [0.3, {"power_mw.0": 300000, "energy_mj.0": 1_100_000, "reasons.1": 0x4}],
                [0.3, {"reasons.1": 0x4 | 0x40, "energy_mj.1": 2_050_000}],
            ],
        }
    )
    # the real bindings ran, against the fake library
    assert result["binding_file"].endswith("site-packages/pynvml.py")
    assert result["library"] == str(fake_nvml_libs["current"] / "libnvidia-ml.so.1")
    assert result["event_api"] == "present"
    ev = evidence(result)
    assert ev.source == "board"
    assert ev.scope == "board"
    assert ev.description == "GPU board power sum (NVIDIA)"
    assert ev.power_limit_w == 1400.0  # 2 x 700 W enforced
    assert ev.throttle_monitored
    assert result["gpu_indices"] == [0, 1]
    first, last = ev.samples[0], ev.samples[-1]
    assert first.gpu_watts == [100.0, 250.5]
    assert first.watts == 350.5
    assert first.energy_j == 3000.0  # (1e6 + 2e6) mJ
    assert first.throttle_reasons == []
    assert last.gpu_watts == [300.0, 250.5]
    assert last.energy_j == 3150.0
    assert last.throttle_reasons == ["sw_power_cap", "hw_thermal"]
    assert ev.gaps == []
    # throttle counts over the whole record: sw_power_cap set on GPU 1 counts ("any GPU")
    window = (ev.samples[0].t_ns, ev.samples[-1].t_ns + 1)
    figures = energy.window_figures(ev, [window], output_tokens=315)
    capped = sum("sw_power_cap" in s.throttle_reasons for s in ev.samples)
    assert figures.throttle_counts["sw_power_cap"] == capped > 0
    assert figures.throttle_counts["hw_thermal"] < capped
    assert figures.throttle_counts["hw_slowdown"] == 0
    # energy by counter difference, up to the reading where the counter last moved
    last_move = next(s.t_ns for s in ev.samples if s.energy_j == 3150.0)
    figures = energy.window_figures(ev, [(window[0], last_move)], output_tokens=315)
    assert figures.energy_method == "counter"
    assert figures.energy_j == pytest.approx(150.0)  # 3150 - 3000 J
    assert figures.tokens_per_joule == pytest.approx(2.1)


def test_pre_r535_driver_falls_back_to_the_throttle_reasons_call(fake_nvml):
    fake_nvml.set_state(count=1, reasons=0x24)
    result = fake_nvml.run({"action": "sample", "hz": 20, "steps": []}, variant="old")
    assert result["event_api"] == "FunctionNotFound"  # the old library lacks the symbol
    ev = evidence(result)
    assert ev.throttle_monitored
    assert ev.samples[0].throttle_reasons == ["sw_power_cap", "sw_thermal"]


def test_energy_not_supported_falls_back_to_the_integral(fake_nvml):
    fake_nvml.set_state(count=2, energy_mj="NA", power_mw=200000)
    result = fake_nvml.run({"action": "sample", "hz": 20, "steps": [], "tail_s": 0.4})
    ev = evidence(result)
    assert result["has_energy_counter"] is False
    assert all(s.energy_j is None for s in ev.samples)
    assert all(s.watts == 400.0 for s in ev.samples)
    start, end = ev.samples[0].t_ns, ev.samples[-1].t_ns
    figures = energy.window_figures(ev, [(start, end)], output_tokens=100)
    assert figures.energy_method == "integral"
    assert figures.energy_j == pytest.approx(400.0 * (end - start) / 1e9)


def test_a_lost_gpu_mid_run_is_a_gap_then_sampling_resumes(fake_nvml):
    fake_nvml.set_state(count=1, power_mw=300000)
    result = fake_nvml.run(
        {
            "action": "sample",
            "hz": 20,
            "steps": [[0.25, {"power_mw": "LOST"}], [0.3, {"power_mw": 310000}]],
        }
    )
    ev = evidence(result)
    assert len(ev.gaps) == 1
    assert ev.gaps[0].cause.startswith("GPU 0: reading power: NVML error: GPU is lost")
    watts = [s.watts for s in ev.samples]
    assert 0.0 not in watts
    assert watts[0] == 300.0
    assert watts[-1] == 310.0
    assert not [s for s in ev.samples if ev.gaps[0].start_ns <= s.t_ns < ev.gaps[0].end_ns]


def test_set_up_errors_name_the_problem(fake_nvml):
    fake_nvml.set_state(count=2)
    assert fake_nvml.run({"action": "open", "gpus": [1]})["error"] is None
    error = fake_nvml.run({"action": "open", "gpus": [1, 3]})["error"]
    assert error == (
        "spec hardware.gpus names GPU 3, but NVML sees 2 GPU(s) (indices 0..1); fix hardware.gpus"
    )
    fake_nvml.set_state(init="NODRIVER")
    error = fake_nvml.run({"action": "open"})["error"]
    assert error.startswith("board power source: the NVIDIA driver is not loaded")
    fake_nvml.set_state(count=1, power_mw="NOPERM")
    error = fake_nvml.run({"action": "open"})["error"]
    assert "GPU 0: reading power: NVML refused" in error


def test_library_not_found_message_says_what_to_do():
    import pynvml

    exc = pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    assert isinstance(exc, pynvml.NVMLError_LibraryNotFound)
    message = str(nvml_error(exc, "board power source"))
    assert "libnvidia-ml.so.1" in message
    assert "set power.source to redfish, ipmi, command, prometheus or none" in message
    assert isinstance(nvml_error(exc, "x"), PowerError)


def test_inventory_reads_the_gpus_and_rates_bandwidth(fake_nvml):
    fake_nvml.set_state(
        count=2, driver="550.54.15", mem_total_mib=81559, enforced_mw=650000, bus_width=5120
    )
    inv = fake_nvml.run({"action": "inventory", "hardware": {"adapter": "nvidia"}})
    assert inv["source"] == "nvml"
    assert inv["driver"] == "550.54.15"
    assert inv["accelerator"] == "NVIDIA H100 80GB HBM3"
    assert inv["vendor"] == "NVIDIA"
    assert [g["index"] for g in inv["gpus"]] == [0, 1]
    gpu = inv["gpus"][0]
    assert gpu["uuid"] == "GPU-00000000-0000-0000-0000-000000000000"
    assert gpu["memory_total_mib"] == 81559
    assert gpu["power_limit_w"] == 650.0
    assert gpu["memory_bus_width_bits"] == 5120
    assert gpu["max_memory_clock_mhz"] == 2619
    # the GPU-name table (datasheet) gives the figure; NVML clocks agree within 10 %
    assert inv["rated_bw_tbs_per_gpu"] == 3.35
    assert inv["rated_bw_source"].startswith("GPU-name table (NVIDIA H100")
    assert inv["rated_bw_tbs_total"] == pytest.approx(6.7)
    assert inv["notes"] == []

    chosen = fake_nvml.run(
        {"action": "inventory", "hardware": {"gpus": [1], "rated_bw_tbs_per_gpu": 3.0}}
    )
    assert [g["index"] for g in chosen["gpus"]] == [1]
    assert (chosen["rated_bw_tbs_per_gpu"], chosen["rated_bw_source"]) == (3.0, "spec")


def test_all_visible_gpus_refused_when_the_model_uses_fewer(fake_nvml):
    # An 8-GPU node serving a TP1 model: "all visible" would add 7 idle boards to the power
    fake_nvml.set_state(count=8)
    refused = fake_nvml.run(
        {"action": "inventory", "hardware": {"adapter": "nvidia"}, "gpus_in_use": 1}
    )
    assert refused["error"].startswith("NVML sees 8 GPUs but the model runs on 1")
    assert "hardware.gpus" in refused["error"]
    # naming them is the way out; as many visible as in use needs nothing
    named = fake_nvml.run({"action": "inventory", "hardware": {"gpus": [3]}, "gpus_in_use": 1})
    assert [g["index"] for g in named["gpus"]] == [3]
    fake_nvml.set_state(count=2)
    every = fake_nvml.run({"action": "inventory", "hardware": {}, "gpus_in_use": 2})
    assert [g["index"] for g in every["gpus"]] == [0, 1]


def test_inventory_of_a_gpu_the_table_lacks_uses_nvml_clocks(fake_nvml):
    fake_nvml.set_state(count=1, name="NVIDIA Future GPU", mem_clock_mhz=3000, bus_width=8192)
    inv = fake_nvml.run({"action": "inventory", "hardware": {}})
    # 2 x 3000 MHz x 8192 bit / 8 = 6.144 TB/s
    assert inv["rated_bw_tbs_per_gpu"] == pytest.approx(6.144)
    assert inv["rated_bw_source"] == "NVML clocks (3000 MHz x 8192 bit)"
    assert inv["vendor"] == "NVIDIA"


def test_inventory_notes_a_table_that_disagrees_with_the_clocks(fake_nvml):
    fake_nvml.set_state(count=1, mem_clock_mhz=1000)  # an H100 name with far lower clocks
    inv = fake_nvml.run({"action": "inventory", "hardware": {}})
    assert inv["rated_bw_tbs_per_gpu"] == 3.35
    assert inv["notes"] == ["NVML clocks give 1.28 TB/s per GPU, the table 3.35 TB/s (62% apart)"]


def test_inventory_without_a_driver_keeps_spec_values_or_fails_when_strict(fake_nvml):
    fake_nvml.set_state(init="NODRIVER")
    inv = fake_nvml.run({"action": "inventory", "hardware": {"rated_bw_tbs_per_gpu": 2.0}})
    assert inv["source"] == "none"
    assert inv["gpus"] == []
    assert (inv["rated_bw_tbs_per_gpu"], inv["rated_bw_source"]) == (2.0, "spec")
    assert inv["notes"][0].startswith("GPU inventory not read: starting NVML: the NVIDIA driver")
    strict = fake_nvml.run({"action": "inventory", "hardware": {}, "strict": True})
    assert strict["error"].startswith("starting NVML: the NVIDIA driver is not loaded")
    fake_nvml.set_state(count=1)
    missing = fake_nvml.run({"action": "inventory", "hardware": {"gpus": [4]}})
    assert "hardware.gpus names GPU 4" in missing["error"]
