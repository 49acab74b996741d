# recipes/multi30k_en_de/multi30k_data.sh: the step `data` of a model trained here (run.sh without
# BASELINE): Multi30k en->de from $M with an 8,000-piece joint sentencepiece model, test =
# test2016. Sourced after setting M and DATA_WORKERS; sets DATA_KEY and prepare_data.
DATA_KEY="multi30k $M vocab 8000"
prepare_data() {
  fairseq-heads prepare --work-dir "$STEP_OUT" --src en --tgt de \
    --train "$M/train.en.gz,$M/train.de.gz" --valid "$M/val.en.gz,$M/val.de.gz" \
    --test "$M/test_2016_flickr.en.gz,$M/test_2016_flickr.de.gz" \
    --vocab-size 8000 --workers "$DATA_WORKERS"
}
