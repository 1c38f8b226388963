"""The RNN placer (Mirhoseini et al., ICML 2017; the 2018 grouper as an option): an LSTM
sequence-to-sequence policy (:mod:`.policy`), its distribution, RLlib module and learner."""
