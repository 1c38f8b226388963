"""The paper's three models: graph sizes, op coverage, placements by op name."""
import json

import pytest

from hsdag_core.coarsening import build_graph

# (placeable nodes, edges, nodes after co-location coarsening)
SIZES = {"resnet50": (123, 138, 37), "inception_v3": (216, 250, 62), "bert_base": (269, 327, 88)}


@pytest.mark.parametrize("name", list(SIZES))
def test_paper_model_graph(name, tmp_path):
    model, fine, coarse, mapping = build_graph(name, "colocation")
    n, m, nc = SIZES[name]
    assert (fine.num_nodes, len(fine.edges), coarse.num_nodes) == (n, m, nc)
    ops = [op.get_friendly_name() for op in model.get_ordered_ops()]
    held = [op for node in fine.nodes for op in node.ops]
    assert sorted(held) == sorted(ops), "every op of the model maps to exactly one node"
    assert sorted(op for node in coarse.nodes for op in node.ops) == sorted(ops)
    assert all(e.src < e.dst for e in coarse.edges)
    # a placement of the coarse graph, written as op name -> device, reads back
    placement = {node.name: ("CPU" if k % 3 else "CPU_F32") for k, node in enumerate(coarse.nodes)}
    f = tmp_path / "placement.json"
    f.write_text(json.dumps(coarse.expand_placement(placement)))
    assert coarse.placement_from_ops(json.loads(f.read_text())) == placement
    # the fine graph reads the same file as the fine version of that placement
    fine_back = fine.placement_from_ops(json.loads(f.read_text()))
    assert all(fine_back[fine.nodes[i].name] == placement[coarse.nodes[mapping[i]].name]
               for i in range(fine.num_nodes))


def test_any_torchvision_or_hugging_face_architecture_by_name():
    """Models outside the zoo, random weights: tv:NAME and hf:TYPE build, convert and
    coarsen like the zoo's; every op maps to one node."""
    for spec in ("tv:squeezenet1_1", "hf:distilbert"):
        model, fine, coarse, _ = build_graph(spec, "colocation")
        ops = sorted(op.get_friendly_name() for op in model.get_ordered_ops())
        assert sorted(op for node in fine.nodes for op in node.ops) == ops
        assert 10 < coarse.num_nodes < fine.num_nodes


@pytest.mark.slow
def test_an_encoder_decoder_transformer_builds():
    """hf:t5 (random weights, T5's default size) converts with the decoder's ids as an input."""
    model, fine, _, _ = build_graph("hf:t5", "colocation")
    assert [p.get_any_name() for p in model.inputs] == ["input_ids", "attention_mask", "decoder_input_ids"]
    assert all(p.get_partial_shape().is_static for p in model.inputs)
    assert fine.num_nodes > 100


def test_hf_specs_set_config_fields_and_the_sequence_length():
    from hsdag_core.hf_models import parse_hf_spec

    assert parse_hf_spec("gpt2") == ("gpt2", {}, 128)
    assert parse_hf_spec("llama:num_hidden_layers=2:rms_norm_eps=1e-5:tie_word_embeddings=false:seq=64") \
        == ("llama", {"num_hidden_layers": 2, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}, 64)


def test_a_small_decoder_llm_and_a_vision_transformer_build_from_their_specs():
    """hf:llama made small in the spec converts with input_ids of the given length; hf:vit, a
    vision model, converts with one image of its config's size as pixel_values."""
    model, fine, _, _ = build_graph("hf:llama:num_hidden_layers=2:hidden_size=128:intermediate_size=256"
                                    ":num_attention_heads=4:num_key_value_heads=4:seq=32", "colocation")
    assert {p.get_any_name(): list(p.get_shape()) for p in model.inputs} == {
        "input_ids": [1, 32], "attention_mask": [1, 32]}
    assert sum(n.op_type == "MatMul" for n in fine.nodes) >= 2 * 7  # q, k, v, o, gate, up, down per layer
    model, fine, _, _ = build_graph("hf:vit:num_hidden_layers=2:image_size=64", "colocation")
    assert {p.get_any_name(): list(p.get_shape()) for p in model.inputs} == {"pixel_values": [1, 3, 64, 64]}
    assert fine.num_nodes > 30


# the cases that build a model first (5-12 s each here) run with -m slow
@pytest.mark.parametrize("spec,words", [("tv:no_such_net", "torchvision"),
                                        ("hf:no_such_type", "Hugging Face"),
                                        ("nope:x", "unknown model"),
                                        pytest.param("hf:llama", "hf:llama:num_hidden_layers=2",
                                                     marks=pytest.mark.slow),
                                        ("hf:gpt2:n_layer", "is not KEY=VALUE"),
                                        ("hf:gpt2:no_field=1", "has no field 'no_field'"),
                                        pytest.param("hf:patchtst", "export this one to ONNX",
                                                     marks=pytest.mark.slow),
                                        pytest.param("hf:xlnet:n_layer=1", "export the model yourself",
                                                     marks=pytest.mark.slow)])
def test_unknown_architecture_names_are_one_sentence(spec, words, capsys):
    from tests.test_bad_inputs import one_error

    assert words in one_error(capsys, "graph", [spec])


@pytest.mark.slow
@pytest.mark.parametrize("spec,tokens", [("hf:clip", 77), ("hf:siglip", 64)])
def test_text_image_transformers_build_with_both_inputs(spec, tokens):
    """CLIP and SigLIP read tokens and an image; the tokens are cut to the text tower's
    positions (77 and 64, not the default 128) and their nested outputs flattened."""
    model, fine, _, _ = build_graph(spec, "colocation")
    shapes = {name: list(p.get_shape()) for p in model.inputs for name in p.get_names()}
    assert shapes["input_ids"] == [1, tokens] and shapes["attention_mask"] == [1, tokens]
    assert shapes["pixel_values"] == [1, 3, 224, 224]
    assert fine.num_nodes > 100


def test_a_speech_model_reads_a_second_of_waveform():
    """hf:wav2vec2 (main input ``input_values``) converts with one second at 16 kHz."""
    model, fine, _, _ = build_graph("hf:wav2vec2:num_hidden_layers=1", "colocation")
    [waveform] = model.inputs
    assert "input_values" in waveform.get_names() and list(waveform.get_shape()) == [1, 16000]
    assert sum(n.op_type == "Convolution" for n in fine.nodes) >= 7  # the feature encoder's


def test_a_sequence_longer_than_the_models_positions_is_refused():
    from transformers import AutoConfig

    from hsdag_core.errors import GraphError
    from hsdag_core.hf_models import _fit_positions

    clip = AutoConfig.for_model("clip")
    assert _fit_positions("hf:clip", clip, 128, explicit=False) == 77
    assert _fit_positions("hf:clip", clip, 32, explicit=True) == 32
    with pytest.raises(GraphError, match="seq=100 is longer than the model's 77 positions"):
        _fit_positions("hf:clip:seq=100", clip, 100, explicit=True)


def test_a_model_transformers_auto_class_cannot_build_is_built_from_its_mapping_or_refused():
    import torch
    from transformers import AutoConfig, FunnelModel, PretrainedConfig

    from hsdag_core.errors import GraphError
    from hsdag_core.hf_models import _base_model

    with torch.device("meta"):  # no weights allocated
        # AutoModel.from_config fails on Funnel's default config (no architectures)
        assert isinstance(_base_model("hf:funnel", AutoConfig.for_model("funnel")), FunnelModel)

        class Unknown(PretrainedConfig):
            model_type = "no_such_model_type"

        with pytest.raises(GraphError, match="transformers cannot build hf:x .*export the model to ONNX"):
            _base_model("hf:x", Unknown())
