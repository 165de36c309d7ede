# The configuration of a mesa-export remote-code model (docs/export.md, "Remote code"): the keys
# mesa_lm_core.py reads, kept as they are in config.json.
try:
    from transformers import PreTrainedConfig
except ImportError:  # transformers 4
    from transformers import PretrainedConfig as PreTrainedConfig


class MesaLMConfig(PreTrainedConfig):
    model_type = "mesa_lm"

    def __init__(self, vocab_size=257, hidden_size=64, num_hidden_layers=2, num_heads=2, head_dim=32,
                 intermediate_size=192, conv_size=4, layer_mixers=None, attention_windows=None,
                 rotary_base=10000.0, cg_steps=30, cg_tol=0.0, lambda_floor=0.25, gamma_cap=0.0025,
                 logit_softcap=30.0, reset_at_bos=False, mesa_tie_embeddings=True, rnn_width=0,
                 ssm_inner=0, ssm_head_dim=0, ssm_state=0, bos_token_id=256, eos_token_id=256,
                 pad_token_id=None, use_cache=False, mesa_model=None, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.intermediate_size = intermediate_size
        self.conv_size = conv_size
        self.layer_mixers = list(layer_mixers) if layer_mixers is not None else ["mesa"] * num_hidden_layers
        self.attention_windows = (list(attention_windows) if attention_windows is not None
                                  else [0] * num_hidden_layers)
        self.rotary_base = rotary_base
        self.cg_steps = cg_steps
        self.cg_tol = cg_tol
        self.lambda_floor = lambda_floor
        self.gamma_cap = gamma_cap
        self.logit_softcap = logit_softcap
        self.reset_at_bos = reset_at_bos
        self.mesa_tie_embeddings = mesa_tie_embeddings
        self.rnn_width = rnn_width
        self.ssm_inner = ssm_inner
        self.ssm_head_dim = ssm_head_dim
        self.ssm_state = ssm_state
        self.use_cache = use_cache
        self.mesa_model = mesa_model
        kwargs["tie_word_embeddings"] = False  # the modeling code ties (or not) itself
        super().__init__(bos_token_id=bos_token_id, eos_token_id=eos_token_id,
                         pad_token_id=pad_token_id, **kwargs)
