"""What greenadapt writes and reads back on disk.

- ``manifest`` and ``stage``: atomic stage folders, their manifests, locks and skip-if-unchanged;
- ``workspace`` and ``destination``: where outputs go, and what may be replaced;
- ``pretrained``: the base model a pipeline starts from (local folder, Hub id, the bundled MiniLM);
- ``model_folder``: the one reader of a model folder (expanded or plain) that training and prediction open;
- ``model_card`` and ``info``: what a folder says about itself, to people and to ``greenadapt info``.
"""
