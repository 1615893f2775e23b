"""The card's model-index: published cells read from it, refit cells written into it beside the
authors' numbers with the rest of the card byte-for-byte, and the validator's check that the copy agrees with the
refit annotation. Cards are real ones: written by huggingface_hub's own ``ModelCardData(eval_results=...)``,
re-serialised by its ``ModelCard`` (what ``metadata_update`` does), and a hand-kept one with comments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from bnconvention.audit.measure.published import card_published_cells, cell_origins, merge_published
from bnconvention.authoring.card_model_index import refit_index_results, stamp_model_index_text
from bnconvention.errors import CardError, UntrustedInputError
from bnconvention.formats.canonical import canonical_json, canonical_sha256
from bnconvention.formats.card import parse_card_metadata, split_front_matter
from bnconvention.formats.model_index import iter_index_metrics, read_model_index
from bnconvention.standard.locations import annotation_filename
from bnconvention.standard.models import RefitAnnotation
from bnconvention.validation import validate_paths
from bnconvention.validation.model_index import CODE, REFIT_METRIC_CONFIG, read_refit_metrics

ROOT = Path(__file__).resolve().parent.parent
ANNOTATION = json.loads((ROOT / "schema/tests/valid/refit-annotation-full.json").read_text())
SHA = canonical_sha256(ANNOTATION)
PATH = annotation_filename(SHA)
MAPPING = {"forget accuracy": "df", "test accuracy": "dt"}
CONVENTION = "refit/retain/train-transform/exact"


def hand_card(fixtures_dir: Path) -> str:
    return (fixtures_dir / "cards" / "model_index.md").read_text(encoding="utf-8")


def hf_card() -> str:
    """A card as huggingface_hub writes one: ModelCardData with eval results, dumped by its own YAML writer."""
    results = [EvalResult(task_type="image-classification", dataset_type="sklearn/digits", dataset_name="Digits",
                          dataset_split="test", metric_type="accuracy", metric_name=name, metric_value=value)
               for name, value in (("forget accuracy", 0.125), ("test accuracy", 0.8671875))]
    data = ModelCardData(license="mit", model_name="tiny-digits", eval_results=results)
    return f"---\n{data.to_yaml()}\n---\n# Tiny digits\n"


def stamped(text: str) -> str:
    annotation = RefitAnnotation.model_validate(ANNOTATION)
    origins = cell_origins(parse_card_metadata(text), MAPPING)
    return stamp_model_index_text(text, {PATH: refit_index_results(annotation, path=PATH, sha256=SHA,
                                                                   origins=origins)}, model_name="model")


# --- reading -----------------------------------------------------------------------------------------------------


def test_model_index_written_by_huggingface_hub_is_read_as_published_cells() -> None:
    metadata = parse_card_metadata(hf_card())
    metrics = read_model_index(metadata, source="README.md")
    assert [(m.pointer, m.label, m.value) for m in metrics] == [
        ("/model-index/0/results/0/metrics/0", "forget accuracy", 0.125),
        ("/model-index/0/results/0/metrics/1", "test accuracy", 0.8671875)]
    assert card_published_cells(metadata, {**MAPPING, "retain accuracy": "dr"}, source="README.md") == {
        "df": 0.125, "dt": 0.8671875}


@pytest.mark.parametrize(("index", "pointer"), [
    pytest.param("not a list", "/model-index", id="not-a-list"),
    pytest.param([{"results": []}], "/model-index/0", id="entry-without-name"),
    pytest.param([{"name": "m", "results": [{"task": {"type": "x"}, "metrics": []}]}], "/model-index/0/results/0",
                 id="result-without-dataset"),
    pytest.param([{"name": "m", "results": [{"task": {"type": "x"}, "dataset": {"type": "d", "name": "D"},
                                             "metrics": [{"type": "accuracy"}]}]}],
                 "/model-index/0/results/0/metrics/0", id="metric-without-value"),
])
def test_a_malformed_model_index_is_refused_naming_where(index: object, pointer: str) -> None:
    with pytest.raises(CardError, match=f"model-index at {pointer}: "):
        read_model_index({"model-index": index}, source="README.md")
    assert list(iter_index_metrics({"model-index": index})) == []  # the lenient walk passes over it


def test_a_label_matches_a_metric_name_before_a_metric_type() -> None:
    metadata = parse_card_metadata(hf_card())
    # both metrics are of type accuracy: by type the label is ambiguous, by name it is not
    assert card_published_cells(metadata, {"Test Accuracy": "dt"}, source="README.md") == {"dt": 0.8671875}
    with pytest.raises(UntrustedInputError, match="2 metrics named 'accuracy' with different values"):
        card_published_cells(metadata, {"accuracy": "dt"}, source="README.md")


def test_a_published_value_that_is_not_a_number_is_refused() -> None:
    metadata = parse_card_metadata(hf_card().replace("value: 0.125", "value: 12.5 ± 0.3"))
    with pytest.raises(UntrustedInputError, match="'forget accuracy' at /model-index/0/results/0/metrics/0 has "
                                                  "value '12.5 ± 0.3', not a finite number"):
        card_published_cells(metadata, MAPPING, source="README.md")


def test_refit_results_written_back_are_never_read_as_published() -> None:
    before = card_published_cells(parse_card_metadata(hf_card()), MAPPING, source="README.md")
    after = card_published_cells(parse_card_metadata(stamped(hf_card())), MAPPING, source="README.md")
    assert after == before == {"df": 0.125, "dt": 0.8671875}


def test_the_spec_completes_the_card_and_wins_with_a_note() -> None:
    cells, notes = merge_published({"df": 0.125, "dt": 0.86}, {"dt": 0.87, "dr": 0.99})
    assert cells == {"df": 0.125, "dt": 0.87, "dr": 0.99}
    assert notes == ["published cell dt: the spec's 0.87 is used, the card's model-index says 0.86"]


# --- writing -----------------------------------------------------------------------------------------------------


def test_refit_cells_stand_beside_the_published_metric_they_map_from(fixtures_dir: Path) -> None:
    text = stamped(hand_card(fixtures_dir))
    index = parse_card_metadata(text)["model-index"]
    assert [entry["name"] for entry in index] == ["tiny-digits", "tiny-digits"]  # the authors' name, kept
    results = index[1]["results"]
    # df and dt are published: one result with the authors' task and dataset, a metric of their type each
    assert results[0]["task"] == index[0]["results"][0]["task"]
    assert results[0]["dataset"] == index[0]["results"][0]["dataset"]
    assert [(m["type"], m["name"], m["value"], m["args"]["state"]) for m in results[0]["metrics"]] == [
        ("accuracy", f"Forget accuracy (BatchNorm refit: {CONVENTION})", 0.625, "refit"),
        ("accuracy", f"test accuracy (BatchNorm refit: {CONVENTION})", 0.869140625, "refit")]
    # the gap is not published: its shipped and refit values as measured, on the annotation's dataset
    assert results[1]["dataset"] == {"type": "sklearn/digits", "name": "sklearn/digits"}
    assert [(m["name"], m["value"]) for m in results[1]["metrics"]] == [
        ("abs(df - dt) (shipped, measured by the BatchNorm refit audit)", 0.7421875),
        (f"abs(df - dt) (BatchNorm refit: {CONVENTION})", 0.244140625)]
    assert {m["config"] for r in results for m in r["metrics"]} == {REFIT_METRIC_CONFIG}
    assert {m["args"]["annotation"] for r in results for m in r["metrics"]} == {PATH}


def test_everything_but_our_entry_stays_byte_for_byte(fixtures_dir: Path) -> None:
    original = hand_card(fixtures_dir)
    text = stamped(original)
    end = original.index("\n\npipeline_tag")  # the authors' model-index ends here; comments and quoting kept
    assert text.startswith(original[:end] + "\n- name: tiny-digits\n  results:\n")
    assert text.endswith(original[end:])
    assert stamped(text) == text  # stamping the same annotation again changes nothing


def test_another_annotation_is_added_and_the_same_one_replaced(fixtures_dir: Path) -> None:
    text = stamped(hand_card(fixtures_dir))
    other = {"task": {"type": "image-classification"}, "dataset": {"type": "d", "name": "D"}, "metrics": [
        {"type": "df", "value": 0.5, "config": REFIT_METRIC_CONFIG,
         "args": {"annotation": "bnconvention/refit-000000000000.json", "cell": "df"}}]}
    both = stamp_model_index_text(text, {"bnconvention/refit-000000000000.json": [other]}, model_name="m")
    ours = parse_card_metadata(both)["model-index"][1]["results"]
    assert [r["metrics"][0]["args"]["annotation"] for r in ours] == [PATH, PATH, other["metrics"][0]["args"][
        "annotation"]]
    again = stamp_model_index_text(both, {PATH: [other | {"metrics": [{**other["metrics"][0], "args": {
        "annotation": PATH, "cell": "df"}}]}]}, model_name="m")
    assert [r["metrics"][0]["args"]["annotation"] for r in parse_card_metadata(again)["model-index"][1][
        "results"]] == [PATH, "bnconvention/refit-000000000000.json"]


def test_huggingface_hub_reads_the_refit_results_back() -> None:
    card = ModelCard(stamped(hf_card()))
    assert card.data.model_name == "tiny-digits"
    ours = [r for r in card.data.eval_results if r.metric_config == REFIT_METRIC_CONFIG]
    assert [(r.metric_name, r.metric_value) for r in ours][0] == (
        f"forget accuracy (BatchNorm refit: {CONVENTION})", 0.625)
    assert len(ours) == 4 and len(card.data.eval_results) == 6


def test_crlf_cards_stay_crlf(fixtures_dir: Path) -> None:
    original = hand_card(fixtures_dir).replace("\n", "\r\n")
    text = stamped(original)
    assert text.count("\n") == text.count("\r\n")
    assert text.endswith(original[original.index("\r\n\r\npipeline_tag"):])


def test_a_flow_style_model_index_is_written_again_as_data() -> None:
    original = ("---\nlicense: mit\nmodel-index: [{name: m, results: [{task: {type: image-classification}, dataset: "
                "{type: sklearn/digits, name: Digits}, metrics: [{type: accuracy, name: forget accuracy, value: 0.125}"
                "]}]}]\ntags: [a]\n---\nbody\n")
    text = stamped(original)
    index = parse_card_metadata(text)["model-index"]
    assert index[0] == yaml.safe_load(original.split("---\n")[1])["model-index"][0]
    assert text.startswith("---\nlicense: mit\nmodel-index:\n- name: m\n") and text.endswith("tags: [a]\n---\nbody\n")


def test_a_card_without_model_index_gets_one_named_after_the_model() -> None:
    text = stamped("---\nlicense: mit\n---\n# m\n")
    assert text.startswith("---\nlicense: mit\nmodel-index:\n- name: model\n  results:\n") and text.endswith(
        "---\n# m\n")
    assert stamped("# no front matter\n").endswith("---\n# no front matter\n")


def test_a_model_index_that_is_not_a_list_is_refused() -> None:
    with pytest.raises(CardError, match="the card's model-index is a str, not a list of entries"):
        stamped("---\nmodel-index: results go here\n---\n")


# --- validating --------------------------------------------------------------------------------------------------


def release(tmp_path: Path, card: str) -> Path:
    (tmp_path / "bnconvention").mkdir(exist_ok=True)
    (tmp_path / PATH).write_text(canonical_json(ANNOTATION))
    (tmp_path / "README.md").write_text(card, encoding="utf-8")
    return tmp_path


def mismatches(folder: Path) -> list[tuple[str, str]]:
    return [(i.path, i.message) for i in validate_paths([folder]).issues if i.code == CODE]


def test_the_copy_agrees_with_the_annotation(tmp_path: Path, fixtures_dir: Path) -> None:
    text = stamped(hand_card(fixtures_dir))
    assert len(read_refit_metrics(parse_card_metadata(text))[0]) == 4
    assert mismatches(release(tmp_path, text)) == []


def test_agreement_survives_huggingface_hub_re_serialising_the_card(tmp_path: Path) -> None:
    # metadata_update loads the card into ModelCardData, adds results and writes the model-index again: one entry,
    # results regrouped by task and dataset; our metrics keep their config and args
    card = ModelCard(stamped(hf_card()))
    card.data.eval_results.append(EvalResult(task_type="image-classification", dataset_type="sklearn/digits",
                                             dataset_name="Digits", metric_type="accuracy",
                                             metric_name="retain accuracy", metric_value=0.99))
    text = str(card)
    assert len(parse_card_metadata(text)["model-index"]) == 1
    assert len(read_refit_metrics(parse_card_metadata(text))[0]) == 4
    assert mismatches(release(tmp_path, text)) == []


@pytest.mark.parametrize(("edit", "where", "says"), [
    pytest.param(lambda t: t.replace("value: 0.625", "value: 0.6"), "/model-index/1/results/0/metrics/0/value",
                 "0.6 is not the refit value of cell df", id="value"),
    pytest.param(lambda t: t.replace("value: 0.7421875", "value: 0.75"), "/model-index/1/results/1/metrics/0/value",
                 "0.75 is not the shipped value of cell abs(df - dt)", id="shipped-value"),
    pytest.param(lambda t: t.replace(f"convention: {CONVENTION}", "convention: refit/retain/eval-transform/exact", 1),
                 "/model-index/1/results/0/metrics/0/args/convention", "is not the refit convention of",
                 id="convention"),
    pytest.param(lambda t: t.replace("cell: df", "cell: dr", 1), "/model-index/1/results/0/metrics/0/args/cell",
                 "cell \"dr\" is not one of the cells of", id="cell"),
    pytest.param(lambda t: t.replace(f"sha256: {SHA}", f"sha256: {'f' * 64}", 1),
                 "/model-index/1/results/0/metrics/0/args/sha256", "copies another version of the annotation",
                 id="digest"),
    pytest.param(lambda t: t.replace(f"sha256: {SHA}", f"sha256: {'0' * 64}", 1),  # YAML reads it as the int 0
                 "/model-index/1/results/0/metrics/0/args", "its args give sha256 0, not a string", id="digest-int"),
    pytest.param(lambda t: t.replace(f"annotation: {PATH}", "annotation: bnconvention/refit-000000000000.json", 1),
                 "/model-index/1/results/0/metrics/0/args/annotation", "is not a refit annotation of this release",
                 id="annotation-not-here"),
    pytest.param(lambda t: t.replace("      args:\n        annotation",
                                     "      args: oops\n      x:\n        annotation", 1),
                 "/model-index/1/results/0/metrics/0/args", "cannot be checked: its args are \"oops\"", id="args"),
])
def test_each_disagreement_is_reported_where_it_is(tmp_path: Path, fixtures_dir: Path, edit, where: str,
                                                  says: str) -> None:
    text = edit(stamped(hand_card(fixtures_dir)))
    found = mismatches(release(tmp_path, text))
    assert [path for path, _ in found if path == where] == [where], found
    assert says in next(message for path, message in found if path == where)


def test_a_copy_of_only_some_cells_is_reported(tmp_path: Path, fixtures_dir: Path) -> None:
    text = stamped(hand_card(fixtures_dir))
    metadata = parse_card_metadata(text)
    metadata["model-index"][1]["results"][0]["metrics"].pop(1)  # dt's refit metric
    front = split_front_matter(text)
    partial = text[: front.yaml_start] + yaml.safe_dump(metadata, sort_keys=False) + text[front.yaml_end:]
    assert mismatches(release(tmp_path, partial)) == [("/model-index/1/results/0", (
        f"the model-index copies the refit cells of {(tmp_path / PATH).as_posix()} only in part: dt missing; push "
        "the audit again (bnconvention hub push)"))]


# --- anchoring on a local release ------------------------------------------------------------------------------


def test_anchoring_reads_the_card_beside_the_weights(tmp_path: Path) -> None:
    from bnconvention.audit.measure.checkpoint import published_cells
    from bnconvention.audit.spec.audit_spec import parse_spec
    from bnconvention.errors import PublishedCellsNotFoundError

    spec = parse_spec({"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
                       "published_source": "model_index", "published": {"dt": 0.87}})
    weights = tmp_path / "model.safetensors"
    notes: list[str] = []
    assert published_cells(weights, spec, notes=notes) == {"dt": 0.87}  # no file holds any: the spec's alone
    assert notes == ["published cells: only the spec's, no file beside model.safetensors holds any"]
    (tmp_path / "README.md").write_text(hf_card())
    notes = []
    assert published_cells(weights, spec, notes=notes) == {"df": 0.125, "dt": 0.87}
    assert notes == ["published cell dt: the spec's 0.87 is used, the card's model-index says 0.8671875"]
    (tmp_path / "README.md").write_text("---\nlicense: mit\n---\n")
    spec = parse_spec({"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
                       "published_source": "model_index"})
    with pytest.raises(PublishedCellsNotFoundError, match=r"README.md \(model-index metrics .*: no model-index\)"):
        published_cells(weights, spec)
