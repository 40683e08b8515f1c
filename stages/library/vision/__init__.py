"""Vision stages: the image dataset stages (datasets) and the torchvision preprocess, classify
and train stages (torchvision_stages)."""
