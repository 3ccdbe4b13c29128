#include "titan/models/hf/hf_weights.h"

#include <fmt/ranges.h>

#include "titan/models/decoder_config_diff.h"
#include "titan/models/hf/hf_folder.h"

namespace titan::models {

void load_hf_weights_into(models::Decoder& model, const std::string& folder) {
  const HfFolderReader reader(folder);
  const auto differences =
      models::decoder_config_differences(models::decoder_config_from_hf(reader.config()), model.config);
  TITAN_CHECK(differences.empty(), "{}/config.json describes a different model than the one built ({}: {})", folder,
              "config.json vs model", fmt::join(differences, "; "));
  model.load_state_dict(read_hf_weights(reader, model.config));
}

}  // namespace titan::models
