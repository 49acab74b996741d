def test_train(trained_checkpoint):
    print(trained_checkpoint)
