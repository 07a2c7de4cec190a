# Not an upstream file: the st scripts below (test/mspti_cpp/st/script/test_*.py) are Huawei's
# unittest checks, run by tests/test_cann_samples.py against sample output, not pytest tests.
collect_ignore_glob = ["*"]
