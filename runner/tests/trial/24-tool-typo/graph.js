export const meta = {name: 'tool-typo', slug: 'tool-typo', version: '1'};
export default async function (args, g) {
  return await g.tool("fs.wirte", {path: "x.txt", text: "y"});
}
