"""FID and CLIP score of tessera's images, for real models (issue 23; docs/quality.md).

    python3 -m tessera_eval fid GENERATED REFERENCE      # REFERENCE: a folder of PNGs or a stats .npz
    python3 -m tessera_eval stats FOLDER -o ref.npz      # reference statistics, computed once
    python3 -m tessera_eval clip GENERATED               # text from each PNG's tessera metadata

FID is torchmetrics' FrechetInceptionDistance (InceptionV3 of torch-fidelity by default, or a
tessera classifier's penultimate features with --classifier); the CLIP score is torchmetrics'
CLIPScore (a transformers CLIP model). Run with PYTHONPATH=python from the repository root.
"""
