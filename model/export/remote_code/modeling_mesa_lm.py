# MesaLMForCausalLM: a mesa-export remote-code model for transformers (docs/export.md, "Remote
# code"), loaded with AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True). The
# mathematics is mesa_lm_core.py's (plain PyTorch); this file adapts it to transformers: weights,
# loss, generate.
import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_mesa_lm import MesaLMConfig
from .mesa_lm_core import CONFIG_KEYS, Backbone, Block, Conv, Linear, Norm, logits_from_hidden


class MesaLMForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = MesaLMConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _no_split_modules = ["Block"]
    _is_stateful = True  # recurrent layers: no cache to crop, no assisted decoding
    _supports_cache_class = False

    def __init__(self, config):
        super().__init__(config)
        cfg = self._mesa_cfg()
        self.model = Backbone(cfg)
        self.lm_head = None if cfg["mesa_tie_embeddings"] else Linear(cfg["vocab_size"], cfg["hidden_size"])
        self.post_init()

    def _mesa_cfg(self):
        return {key: getattr(self.config, key) for key in CONFIG_KEYS}

    def _init_weights(self, module):
        # Only for weights a checkpoint does not bring (from_config); loading overwrites them all.
        if isinstance(module, (Linear, Conv)):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, Norm):
            nn.init.ones_(module.weight)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def get_input_embeddings(self):
        return self.model.embeddings

    def set_input_embeddings(self, value):
        self.model.embeddings = value

    def get_output_embeddings(self):
        return self.lm_head

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        # No cache: every step computes the whole prefix again (exact, O(T) per new token).
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def forward(self, input_ids=None, attention_mask=None, labels=None, inputs_embeds=None,
                past_key_values=None, use_cache=None, return_dict=None, **kwargs):
        if input_ids is None or inputs_embeds is not None:
            raise ValueError("MesaLMForCausalLM takes input_ids (the lookup's scale is the model's)")
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            raise ValueError("padding is not supported: a recurrent state would read the pad tokens; "
                             "pass sequences of one length (or one at a time)")
        dtype = torch.float64 if self.model.norm.weight.dtype == torch.float64 else torch.float32
        cfg = self._mesa_cfg()
        hidden = self.model(input_ids, cfg, dtype)
        logits = logits_from_hidden(hidden, self.model, self.lm_head, cfg)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                   labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)


__all__ = ["MesaLMForCausalLM", "Block"]
