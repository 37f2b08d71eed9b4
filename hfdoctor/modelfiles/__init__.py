"""Model-file security: what loading a file of the repository would run, without loading it.

One package, one module per concern (the shape modelaudit, the strongest such scanner, has):

- opcodes, reader: a pickle's opcodes read as _pickle.c and pickle.py read them, from a
  bounded stream;
- picklemachine: the pickle machine run on symbolic values (imports, calls, nested loads);
- allowlist: each import's verdict, from recorded data (upstream_templates/pickle_classes.json);
- containers, sevenzip: zip, tar, 7z and compressed streams, opened in memory within bounds;
- formats: numpy, Keras, ONNX and TensorFlow SavedModel, read as data; hdf5: the root
  attributes of an HDF5 file (a Keras model_config), read where h5py reads them;
- scan: the dispatcher (content first, name second), the container tricks, nested scans.

Nothing here unpickles, imports, extracts or writes anything; rules/security/ turns scans
into findings.
"""
