export const meta = {name: 'throwing-async-helper', slug: 'throwing-async-helper', version: '1'};
async function save() {
  throw new Error("save failed");
}
export default async function (args, g) {
  save();
  return "done";
}
