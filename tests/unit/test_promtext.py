"""The one Prometheus text reader (prometheus_client's parser), against hand-written pages."""

from __future__ import annotations

import pytest

from tokenwatt.promtext import parse, series_sum

NODE_EXPORTER_STYLE = r"""
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{Hostname="sim",UUID="GPU-0",device="nvidia0",gpu="0",modelName="NVIDIA H100 80GB HBM3",pci_bus_id="00000000:18:00.0"} 412.5
DCGM_FI_DEV_POWER_USAGE{gpu="1", modelName="quote \" and \\ and \n",} 3.875e+02 1700000000000
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total{gpu="0"} 1.23456789e+08
up 1
weird NaN
"""


def test_parse_matches_labels_by_name_and_reads_exponents():
    samples = parse(NODE_EXPORTER_STYLE)
    assert [s.name for s in samples] == [
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total",
        "up",
        "weird",
    ]
    assert samples[0].labels["gpu"] == "0"
    assert samples[0].value == 412.5
    assert samples[0].labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert samples[1].value == 387.5  # exponent form, timestamp ignored
    assert samples[1].labels["modelName"] == 'quote " and \\ and \n'
    assert samples[2].value == 123456789.0
    assert samples[4].value != samples[4].value  # NaN parsed, not an error
    assert all(type(s.value) is float for s in samples)  # the library gives ints for "1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('x{gpu="0} 1', "unterminated"),
        ('x{0gpu="1"} 1', "bad label"),
        ("x 12abc", "not a number"),
        ('{gpu="0"} 1', "no metric name"),
        ('x{gpu="0"}', "no value"),
    ],
)
def test_parse_names_the_bad_line(text, message):
    with pytest.raises(ValueError, match=f"line 1: .*{message}"):
        parse(text)


def test_parse_shapes_vllm_and_dcgm_pages():
    text = "\n".join(
        [
            "# HELP x a metric",
            "# TYPE x gauge",
            'DCGM_FI_DEV_POWER_USAGE{Hostname="sim",UUID="GPU-0",gpu="0",modelName="H100"} 412.5',
            'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0"} 1.23456789e+08',
            'weird{a="x,y",b="say \\"hi\\"",c="back\\\\slash"} 3 1700000000000',
            "plain 7",
            'vllm:num_requests_running{engine="0",model_name="m"} 5.0',
        ]
    )
    samples = parse(text)
    names = [s.name for s in samples]
    assert names == [
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "weird",
        "plain",
        "vllm:num_requests_running",
    ]
    assert samples[0].labels["UUID"] == "GPU-0"
    assert samples[0].value == 412.5
    assert samples[1].value == 123456789.0
    assert samples[2].labels == {"a": "x,y", "b": 'say "hi"', "c": "back\\slash"}
    assert samples[2].value == 3.0


def test_a_line_out_of_format_fails_the_page_naming_the_line():
    # Never a partial page: a scrape that read half the series would read as zero elsewhere.
    with pytest.raises(ValueError, match=r"line 2: value is not a number in 'not a metric line'"):
        parse("plain 7\nnot a metric line\nother 1\n")
    with pytest.raises(ValueError, match=r"line 3: value is not a number in 'bad_value"):
        parse('# TYPE x gauge\nx 1\nbad_value{a="1"} abc\n')
    with pytest.raises(ValueError, match=r"line 1: bad comment line '# TYPE x'"):
        parse("# TYPE x\nx 1\n")
    # A malformed label set on which the library itself trips with an IndexError.
    with pytest.raises(ValueError, match=r"line 2: "):
        parse("#1\n{, =nba")


def test_counter_samples_carry_total_whatever_the_page_wrote():
    text = (
        "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"
        'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0"} 5\n'
        "# TYPE vllm:prompt_tokens_total counter\n"
        'vllm:prompt_tokens_total{engine="0"} 9\n'
        "vllm:prompt_tokens_created 1.7e9\n"
        "# TYPE g gauge\n"
        "g 2\n"
    )
    assert [(s.name, s.value) for s in parse(text)] == [
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total", 5.0),
        ("vllm:prompt_tokens_total", 9.0),
        ("vllm:prompt_tokens_created", 1.7e9),
        ("g", 2.0),
    ]


def test_series_sum_over_label_sets_skips_nan_and_other_names():
    samples = parse(
        'r{engine="0"} 3\nr{engine="1"} 2\nr{engine="2"} NaN\nr_total{engine="0"} 99\nw 7\n'
    )
    assert series_sum(samples, "r") == 5.0
    assert series_sum(samples, "w") == 7.0
    assert series_sum(samples, "absent") is None
    assert series_sum(parse("r NaN\n"), "r") is None
    assert series_sum(parse("r +Inf\n"), "r") is None  # not finite: not a count
