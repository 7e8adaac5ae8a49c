"""The stages of the columnar decision (:mod:`adfunnel.serving.decider`), one module each."""
